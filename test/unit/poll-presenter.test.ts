/** The batch poll response (interface 2.3, 2.4) as presented from a stored row: pure function, no database. */
import { expect } from 'chai';
import { presentPoll, type PollView } from '../../api/batch/poll.js';

const view = (over: Partial<PollView>): PollView => ({
  id: 'cf_1',
  request_id: 'r1',
  status: 'running',
  error: null,
  output: {},
  steps: [
    {
      name: 'probe',
      status: 'complete',
      started_at: '2026-11-24T00:00:01.123456+00:00',
      ended_at: '2026-11-24T00:00:02.5+00:00',
      attempts: 1,
    },
    {
      name: 'slice',
      status: 'running',
      started_at: '2026-11-24T00:00:03+00:00',
      ended_at: null,
      attempts: 2,
    },
  ],
  ...over,
});

describe('unit: batch poll presenter', () => {
  it('shows a running workflow without output, with step times in ISO 8601 UTC milliseconds', () => {
    const body = presentPoll(view({ output: { probe: { duration_seconds: 3 } } }));
    expect(Object.keys(body)).to.deep.equal(['workflow_id', 'status', 'steps', 'error', 'request_id']);
    expect(body.steps).to.deep.equal([
      {
        name: 'probe',
        status: 'complete',
        started_at: '2026-11-24T00:00:01.123Z',
        ended_at: '2026-11-24T00:00:02.500Z',
        attempts: 1,
      },
      {
        name: 'slice',
        status: 'running',
        started_at: '2026-11-24T00:00:03.000Z',
        ended_at: null,
        attempts: 2,
      },
    ]);
    expect(body.error).to.equal(null);
  });

  it('shows the error only when errored', () => {
    const error = { name: 'AudioFetchError', message: 'HTTP 404' };
    expect(presentPoll(view({ status: 'errored', error })).error).to.deep.equal(error);
    expect(presentPoll(view({ status: 'running', error })).error).to.equal(null);
  });

  it('orders a completed output and its result as the interface lists them, other keys after', () => {
    // Keys as jsonb returns them (shorter first), not as the interface lists them.
    const result = {
      text: 'hi',
      summary: { num_segments: 1, total_duration: 2, overall_speech_ratio: 0.5, total_speech_duration: 1 },
      metadata: { model: 'm', language: 'en', chunk_count: 1, audio_duration_seconds: 2 },
      segments: [{ id: 0, end_time: 1, duration: 1, confidence: 0.9, start_time: 0, text: 'hi', extra: 1 }],
    };
    const body = presentPoll(
      view({ status: 'complete', output: { result, report: { runs: 1 }, slice: {}, probe: {} } }),
    );
    expect(Object.keys(body)).to.deep.equal([
      'workflow_id',
      'status',
      'steps',
      'output',
      'error',
      'request_id',
    ]);
    expect(Object.keys(body.output!)).to.deep.equal([
      'probe',
      'slice',
      'chunks',
      'aggregate',
      'review',
      'report',
      'result',
    ]);
    expect(body.output!.chunks).to.equal(null);
    expect(body.output!.review).to.equal(null);
    const r = body.output!.result as typeof result;
    expect(Object.keys(r)).to.deep.equal(['segments', 'summary', 'metadata', 'text']);
    expect(Object.keys(r.segments[0])).to.deep.equal([
      'id',
      'start_time',
      'end_time',
      'duration',
      'text',
      'confidence',
      'extra',
    ]);
    expect(Object.keys(r.summary)).to.deep.equal([
      'total_duration',
      'total_speech_duration',
      'overall_speech_ratio',
      'num_segments',
    ]);
    expect(Object.keys(r.metadata)).to.deep.equal([
      'language',
      'model',
      'chunk_count',
      'audio_duration_seconds',
    ]);
  });
});
