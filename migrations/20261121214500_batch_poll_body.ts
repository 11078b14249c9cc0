import type { Knex } from 'knex';

/**
 * The poll response (interface 2.3) kept ready-made on the workflow row, so a
 * poll is one primary-key read of one text column that goes to the client as
 * it is: no JSON parse or render per poll, no second table.
 *
 * Triggers keep it current. A change of status or error, or of the output once
 * complete, re-renders it in a BEFORE UPDATE trigger; a written step row sets
 * its workflow's body to NULL, which re-renders it the same way. A BEFORE ROW
 * trigger runs after the row lock is taken and its queries take a fresh
 * snapshot (READ COMMITTED), so of concurrent step writes (chunks in
 * parallel) the last one to render sees every step.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE batch_workflows ADD COLUMN poll_body text`);
  await knex.raw(`
    CREATE FUNCTION batch_poll_body(p_id text, p_request_id text, p_status text, p_error jsonb, p_output jsonb)
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
          'workflow_id', p_id, 'request_id', p_request_id, 'status', p_status, 'steps', steps, 'error', NULL,
          'output', json_build_object(
            'probe', p_output->'probe',
            'slice', p_output->'slice',
            'chunks', p_output->'chunks',
            'aggregate', p_output->'aggregate',
            'review', COALESCE(p_output->'review', 'null'::jsonb),
            'report', p_output->'report',
            'result', p_output->'result'))::text;
      END IF;
      RETURN json_build_object(
        'workflow_id', p_id, 'request_id', p_request_id, 'status', p_status, 'steps', steps,
        'error', CASE WHEN p_status = 'errored' THEN p_error END)::text;
    END $$`);
  await knex.raw(`
    CREATE FUNCTION batch_workflows_render_poll_body() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      NEW.poll_body := batch_poll_body(NEW.id, NEW.request_id, NEW.status, NEW.error, NEW.output);
      RETURN NEW;
    END $$`);
  await knex.raw(`
    CREATE TRIGGER batch_workflows_poll_body_insert BEFORE INSERT ON batch_workflows
      FOR EACH ROW EXECUTE FUNCTION batch_workflows_render_poll_body()`);
  // Lease renewals and other bookkeeping updates do not re-render.
  await knex.raw(`
    CREATE TRIGGER batch_workflows_poll_body_update BEFORE UPDATE ON batch_workflows
      FOR EACH ROW WHEN (
        NEW.poll_body IS NULL
        OR OLD.status IS DISTINCT FROM NEW.status
        OR OLD.error IS DISTINCT FROM NEW.error
        OR (NEW.status = 'complete' AND OLD.output IS DISTINCT FROM NEW.output))
      EXECUTE FUNCTION batch_workflows_render_poll_body()`);
  await knex.raw(`
    CREATE FUNCTION batch_steps_invalidate_poll_body() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE batch_workflows SET poll_body = NULL WHERE id = NEW.workflow_id;
      RETURN NULL;
    END $$`);
  await knex.raw(`
    CREATE TRIGGER batch_steps_poll_body AFTER INSERT OR UPDATE ON batch_steps
      FOR EACH ROW EXECUTE FUNCTION batch_steps_invalidate_poll_body()`);
  await knex.raw(`UPDATE batch_workflows SET poll_body = NULL`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TRIGGER IF EXISTS batch_steps_poll_body ON batch_steps`);
  await knex.raw(`DROP TRIGGER IF EXISTS batch_workflows_poll_body_update ON batch_workflows`);
  await knex.raw(`DROP TRIGGER IF EXISTS batch_workflows_poll_body_insert ON batch_workflows`);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_steps_invalidate_poll_body()`);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_workflows_render_poll_body()`);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_poll_body(text, text, text, jsonb, jsonb)`);
  await knex.raw(`ALTER TABLE batch_workflows DROP COLUMN IF EXISTS poll_body`);
}
