import type { Knex } from 'knex';

/**
 * The poll body in the order the interface shows (2.3: workflow_id, status,
 * steps, output, error; 2.4: result segments as {id, start_time, end_time,
 * duration, text, confidence}, summary and metadata in their listed order),
 * with the project's extra fields after the listed ones (`request_id` last at
 * the top level, `text` after `metadata` in the result). `output` is stored as
 * jsonb, which keeps keys in its own order, so the result is rebuilt here in
 * the interface's order; the step outputs (probe, slice, ...) keep jsonb's.
 * Every stored body is re-rendered.
 */
const ORDERED_RESULT = `
  -- An object with the listed keys first, in that order, then any others in jsonb's order.
  CREATE OR REPLACE FUNCTION batch_json_ordered(obj jsonb, keys text[]) RETURNS json LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN obj IS NULL OR jsonb_typeof(obj) <> 'object' THEN obj::json ELSE COALESCE(
      (SELECT '{' || string_agg(to_json(e.key)::text || ':' || e.value::text, ','
                                ORDER BY COALESCE(array_position(keys, e.key), 2147483647), e.n) || '}'
         FROM jsonb_each(obj) WITH ORDINALITY AS e(key, value, n)), '{}')::json END
  $$;
  CREATE OR REPLACE FUNCTION batch_result_ordered(r jsonb) RETURNS json LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN r IS NULL OR jsonb_typeof(r) <> 'object' THEN r::json ELSE COALESCE(
      (SELECT '{' || string_agg(to_json(e.key)::text || ':' || CASE
                 WHEN e.key = 'segments' AND jsonb_typeof(e.value) = 'array' THEN
                   (SELECT COALESCE(json_agg(batch_json_ordered(s,
                      ARRAY['id', 'start_time', 'end_time', 'duration', 'text', 'confidence']) ORDER BY i), '[]'::json)
                      FROM jsonb_array_elements(e.value) WITH ORDINALITY AS x(s, i))::text
                 WHEN e.key = 'summary' THEN batch_json_ordered(e.value,
                   ARRAY['total_duration', 'total_speech_duration', 'overall_speech_ratio', 'num_segments'])::text
                 WHEN e.key = 'metadata' THEN batch_json_ordered(e.value,
                   ARRAY['language', 'model', 'chunk_count', 'audio_duration_seconds'])::text
                 ELSE e.value::text END, ','
               ORDER BY COALESCE(array_position(ARRAY['segments', 'summary', 'metadata'], e.key), 2147483647), e.n) || '}'
         FROM jsonb_each(r) WITH ORDINALITY AS e(key, value, n)), '{}')::json END
  $$`;

const POLL_BODY = (ordered: boolean) => `
  CREATE OR REPLACE FUNCTION batch_poll_body(p_id text, p_request_id text, p_status text, p_error jsonb, p_output jsonb)
  RETURNS text LANGUAGE plpgsql VOLATILE AS $$
  DECLARE
    steps json;
  BEGIN
    SELECT COALESCE(json_agg(json_build_object(
             'name', s.name,
             'status', s.status,
             'started_at', to_char(s.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
             'ended_at', to_char(s.ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
             'attempts', s.attempts) ORDER BY s.seq), '[]'::json)
      INTO steps
      FROM batch_steps s WHERE s.workflow_id = p_id;
    IF p_status = 'complete' THEN
      RETURN json_build_object(
        ${ordered ? `'workflow_id', p_id, 'status', p_status, 'steps', steps,` : `'workflow_id', p_id, 'request_id', p_request_id, 'status', p_status, 'steps', steps, 'error', NULL,`}
        'output', json_build_object(
          'probe', p_output->'probe',
          'slice', p_output->'slice',
          'chunks', p_output->'chunks',
          'aggregate', p_output->'aggregate',
          'review', COALESCE(p_output->'review', 'null'::jsonb),
          'report', p_output->'report',
          'result', ${ordered ? `batch_result_ordered(p_output->'result')` : `p_output->'result'`})${ordered ? `,\n        'error', NULL, 'request_id', p_request_id` : ''})::text;
    END IF;
    RETURN json_build_object(
      ${ordered ? `'workflow_id', p_id, 'status', p_status, 'steps', steps,` : `'workflow_id', p_id, 'request_id', p_request_id, 'status', p_status, 'steps', steps,`}
      'error', CASE WHEN p_status = 'errored' THEN p_error END${ordered ? `, 'request_id', p_request_id` : ''})::text;
  END $$`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(ORDERED_RESULT);
  await knex.raw(POLL_BODY(true));
  await knex.raw(`UPDATE batch_workflows SET poll_body = NULL`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(POLL_BODY(false));
  await knex.raw(`DROP FUNCTION IF EXISTS batch_result_ordered(jsonb)`);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_json_ordered(jsonb, text[])`);
  await knex.raw(`UPDATE batch_workflows SET poll_body = NULL`);
}
