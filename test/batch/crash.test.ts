/**
 * Resumability under a hard crash: a real worker process is SIGKILLed in the
 * middle of a job; pg-boss finds its job's heartbeat stale and retries it,
 * a new worker process takes it, the job completes and no chunk that had
 * been checkpointed is sent to the engine again. And a worker that died
 * right after fetching a job: pg-boss retries that job for a live worker.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import type { PgBoss } from 'pg-boss';
import request from 'supertest';
import { tenantStore } from '../../api/batch/storage/index.js';
import { BatchRuntime, WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import { issueKey, pgBossClient, randomId, startWorkerProcess, batchSuite, waitFor } from './helpers.js';

describe('batch: crash and resume (SIGKILL of a real worker process)', function () {
  this.timeout(120_000);
  let child: ChildProcess | undefined;
  // This process only submits and polls (pg-boss producer); the workers live in the child.
  const s = batchSuite({
    prefix: 'crash',
    recordings: {
      'long.wav': {
        clips: [
          'jfk.wav',
          'librivox-austen-0870.wav',
          'librivox-austen-0880.wav',
          'librivox-austen-0890.wav',
        ],
      },
    },
    run: 'producer',
  });
  s.cleanup(() => child?.exitCode === null && child.kill('SIGKILL'));

  it('completes after restart without re-transcribing checkpointed chunks', async () => {
    const key = (await issueKey(s.t, { ownerId: 'tenant-crash', plan: 'pro' })).key;
    const callLog = path.join(s.dir, 'calls.log');
    fs.writeFileSync(callLog, '');
    child = await startWorkerProcess(s.t, callLog);

    const requestId = randomId('crash');
    const sub = await request(s.t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({
        audio_url: `${s.files.url}/long.wav`,
        request_id: requestId,
        segment_seconds: 5,
        concurrency: 1,
      });
    expect(sub.status).to.equal(202);
    const id = sub.body.workflow_id as string;

    const store = tenantStore(s.t.runtime.store, 'tenant-crash');
    const prefix = `transcription/${requestId}/`;
    await waitFor(
      async () => (await store.list(prefix)).filter((k) => /chunk_\d+\.json$/.test(k)).length >= 2,
      60_000,
      50,
    );
    const killedJob = (await s.t.deps.db('batch_workflows').where({ id }).first()).job_id as string;
    child.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));
    const checkpointed = (await store.list(prefix))
      .map((k) => /chunk_(\d+)\.json$/.exec(k)?.[1])
      .filter(Boolean)
      .map(Number);
    const mid = await request(s.t.server)
      .get(`/v1/audio/transcriptions/jobs/${id}`)
      .set('authorization', `Bearer ${key}`);
    expect(mid.body.status).to.equal('running');

    child = await startWorkerProcess(s.t, callLog);
    const done = await waitFor(
      async () => {
        const r = await request(s.t.server)
          .get(`/v1/audio/transcriptions/jobs/${id}`)
          .set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      },
      90_000,
      200,
    );
    child.kill('SIGTERM');
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
    // The same pg-boss job, retried after its heartbeat went stale; its first run counted as a crash.
    const row = await s.t.deps.db('batch_workflows').where({ id }).first();
    expect(row.job_id).to.equal(killedJob);
    expect(row.lapses).to.equal(1);

    const chunkCount = done.body.output.slice.slices.length as number;
    expect(chunkCount).to.be.at.least(5);
    const calls = fs
      .readFileSync(callLog, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' '))
      .filter(([wf]) => wf === id)
      .map(([, chunk, pid]) => ({ chunk: Number(chunk), pid }));
    expect(new Set(calls.map((c) => c.pid)).size).to.equal(2);
    for (let i = 0; i < chunkCount; i++) {
      const n = calls.filter((c) => c.chunk === i).length;
      if (checkpointed.includes(i)) expect(n, `checkpointed chunk ${i}`).to.equal(1);
      else expect(n, `chunk ${i}`).to.be.within(1, 2);
    }
    expect(checkpointed.length).to.be.at.least(2);
    expect(done.body.output.result.metadata.chunk_count).to.equal(chunkCount);
    const probe = done.body.steps.find((s: { name: string }) => s.name === 'probe');
    expect(probe.attempts).to.equal(2); // fetched again by the second process
    // The killed run's copy of the audio went when the next run started; the finished run removed its own.
    const tmp = path.join(s.t.dataDir, 'tmp', 'batch');
    expect((fs.existsSync(tmp) ? fs.readdirSync(tmp) : []).filter((n) => n.startsWith(id))).to.deep.equal([]);
  });
});

describe('batch: a job whose worker died before taking the workflow (pg-boss heartbeat)', function () {
  this.timeout(90_000);
  let boss: PgBoss | undefined;
  let worker: BatchRuntime | undefined;
  // Submissions and pg-boss's supervisor only; the dead worker is a pg-boss client of this test.
  const s = batchSuite({
    prefix: 'dead-job',
    recordings: { 'clip.wav': { clips: ['jfk.wav'], gap: 0.5 } },
    run: 'producer',
  });
  s.cleanup(async () => {
    await worker?.stop();
    await boss?.stop({ graceful: false }).catch(() => {});
  });

  it('pg-boss fails the silent job and retries it, and a live worker runs the workflow from it', async () => {
    const key = (await issueKey(s.t, { ownerId: 'tenant-dead-job', plan: 'pro' })).key;
    const sub = await request(s.t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: `${s.files.url}/clip.wav`, request_id: randomId('dead-job') });
    expect(sub.status).to.equal(202);
    const id = sub.body.workflow_id as string;
    const sent = await s.t.runtime.repo.jobId(id);
    expect(sent, 'the sent job is kept on the workflow').to.match(/^[0-9a-f-]{36}$/);

    // A worker fetches the job (it turns active) and dies before it takes the workflow: no heartbeat follows.
    boss = await pgBossClient(s.t);
    const [dead] = await boss.fetch<{ workflowId: string }>(WORKFLOW_QUEUE);
    const fetchedAt = Date.now();
    expect(dead.id).to.equal(sent);
    expect(dead.data.workflowId).to.equal(id);
    expect(dead.heartbeatSeconds).to.equal(s.t.config.batch.heartbeatSeconds);
    const job = async () => (await boss!.findJobs(WORKFLOW_QUEUE, { id: dead.id }))[0];

    // Stately: no second job of the workflow starts beside the active one.
    expect(await boss.fetch(WORKFLOW_QUEUE)).to.deep.equal([]);
    // The supervisor (this test's app) fails it once its heartbeat is stale, for a retry.
    const retried = await waitFor(async () => {
      const j = await job();
      return j.state === 'retry' ? j : undefined;
    }, 40_000);
    const staleAfter = (Date.now() - fetchedAt) / 1000;
    const { heartbeatSeconds, superviseSeconds } = s.t.config.batch;
    expect(staleAfter, 'seconds until pg-boss gave the job up').to.be.within(
      heartbeatSeconds,
      heartbeatSeconds + superviseSeconds + 5,
    );
    expect(retried.output).to.deep.include({ value: { message: 'job heartbeat timeout' } });
    const row = await s.t.deps.db('batch_workflows').where({ id }).first();
    expect(row.status, 'the dead worker never took it').to.equal('queued');

    // A live worker takes the retry and runs the workflow to its end.
    worker = new BatchRuntime({ ...s.t.deps, store: s.t.runtime.store, outbound: s.t.runtime.outbound });
    await worker.start({ workers: true });
    const done = await waitFor(async () => {
      const r = await s.t.deps.db('batch_workflows').where({ id }).first();
      return r.status === 'complete' || r.status === 'errored' ? r : undefined;
    }, 60_000);
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    expect(done.job_id, 'run from the same job').to.equal(dead.id);
    expect(done.runs).to.equal(1);
    expect(done.lapses).to.equal(0);
    // The worker completes the pg-boss job after it writes the workflow's end: wait for it, not assume it.
    const finished = await waitFor(async () => {
      const j = await job();
      return j.state === 'completed' ? j : undefined;
    }, 10_000).catch(async () => job());
    expect(finished.state).to.equal('completed');
    expect(finished.retryCount).to.equal(1);
  });
});
