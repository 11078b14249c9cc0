/**
 * Graceful stop: a worker that shuts down mid-job gives its workflow back
 * and queues it with a new pg-boss job at once; another worker resumes from
 * the checkpoints without waiting for pg-boss to find the old job's
 * heartbeat stale, and without transcribing a checkpointed chunk again.
 */
import { expect } from 'chai';
import request from 'supertest';
import { BatchRuntime } from '../../api/batch/runtime.js';
import { tenantStore } from '../../api/batch/storage/index.js';
import { issueKey, randomId, batchSuite, waitFor } from './helpers.js';

describe('batch: graceful worker shutdown mid-job', function () {
  this.timeout(90_000);
  let second: BatchRuntime | undefined;
  const s = batchSuite({
    prefix: 'stop',
    recordings: {
      'a.wav': {
        clips: [
          'librivox-austen-0870.wav',
          'librivox-austen-0880.wav',
          'librivox-austen-0890.wav',
          'librispeech-1089-134686-0001.wav',
        ],
      },
    },
    // Long heartbeat: resumption must come from the job queued at stop, not from a stale heartbeat.
    env: { BATCH_HEARTBEAT_SECONDS: '600', STT_THREADS: '1' },
    run: 'workers',
  });
  s.cleanup(() => second?.stop());

  it('gives the workflow back on stop and another worker finishes the job', async () => {
    const key = (await issueKey(s.t, { ownerId: 'tenant-stop', plan: 'pro' })).key;
    const requestId = randomId('stop');
    const sub = await request(s.t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: `${s.files.url}/a.wav`, request_id: requestId, segment_seconds: 4, concurrency: 1 });
    const id = sub.body.workflow_id as string;
    const store = tenantStore(s.t.runtime.store, 'tenant-stop');
    await waitFor(async () => (await store.list(`transcription/${requestId}/`)).length >= 1, 60_000, 50);
    const runJob = (await s.t.deps.db('batch_workflows').where({ id }).first()).job_id as string;
    await s.t.runtime.stop();
    const checkpointed = (await store.list(`transcription/${requestId}/`)).length;
    const row = await s.t.deps.db('batch_workflows').where({ id }).first();
    expect(row.status).to.equal('running');
    expect(row.run_owner, 'given back').to.equal(null);
    expect(row.job_id, 'queued again with a new job').to.be.a('string').and.not.equal(runJob);

    const calls: number[] = [];
    second = new BatchRuntime({
      ...s.t.deps,
      store: s.t.runtime.store,
      outbound: s.t.runtime.outbound,
      hooks: { onEngineCall: (_w, chunk) => calls.push(chunk) },
    });
    await second.start({ workers: true });
    const done = await waitFor(
      async () => {
        const r = await request(s.t.server).get(`/${id}`).set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' ? r : undefined;
      },
      60_000,
      200,
    );
    const resumed = await s.t.deps.db('batch_workflows').where({ id }).first();
    expect(resumed.job_id, 'the new job ran it').to.equal(row.job_id);
    expect(resumed.lapses, 'a shutdown is not a crash').to.equal(0);
    const total = done.body.output.report.chunk_count as number;
    expect(done.body.output.report.chunks_reused).to.be.at.least(checkpointed);
    expect(calls.length).to.equal(total - done.body.output.report.chunks_reused);
    expect(new Set(calls).size).to.equal(calls.length);
  });
});
