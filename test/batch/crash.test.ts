/**
 * Resumability under a hard crash: a real worker process is SIGKILLed in the
 * middle of a job; after a new worker process starts, the job completes and
 * no chunk that had been checkpointed is sent to the engine again.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import PgBoss from 'pg-boss';
import request from 'supertest';
import { tenantStore } from '../../api/batch/storage/index.js';
import { WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import {
  buildRecording,
  createBatchTestApp,
  issueKey,
  randomId,
  startWorkerProcess,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from './helpers.js';

describe('batch: crash and resume (SIGKILL of a real worker process)', function () {
  this.timeout(120_000);
  let t: BatchTestApp;
  let files: FileServer;
  let child: ChildProcess | undefined;
  const dir = tmpDir('batch-crash-');

  before(async () => {
    buildRecording(
      path.join(dir, 'long.wav'),
      ['jfk.wav', 'librivox-austen-0870.wav', 'librivox-austen-0880.wav', 'librivox-austen-0890.wav'],
      0.8,
    );
    files = await startFileServer(dir);
    // This process only submits and polls (pg-boss producer); the workers live in the child.
    t = await createBatchTestApp({ BATCH_WORKERS: 'false' });
    await t.runtime.start({ workers: false });
  });
  after(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('completes after restart without re-transcribing checkpointed chunks', async () => {
    const key = (await issueKey(t, { ownerId: 'tenant-crash', plan: 'pro' })).key;
    const callLog = path.join(dir, 'calls.log');
    fs.writeFileSync(callLog, '');
    const env = {
      DATABASE_URL: t.db.url,
      DATA_DIR: t.dataDir,
      WEBHOOK_SECRET: 'whsec_' + Buffer.from('x'.repeat(32)).toString('base64'),
      OUTBOUND_ALLOW: '127.0.0.1',
      // Lapsed leases are looked for every 0.67 s.
      BATCH_LEASE_SECONDS: '2',
      STT_THREADS: '1',
      LOG_LEVEL: 'warn',
    };
    child = await startWorkerProcess(env, callLog);

    const requestId = randomId('crash');
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({
        audio_url: `${files.url}/long.wav`,
        request_id: requestId,
        segment_seconds: 5,
        concurrency: 1,
      });
    expect(sub.status).to.equal(202);
    const id = sub.body.workflow_id as string;

    const store = tenantStore(t.runtime.store, 'tenant-crash');
    const prefix = `transcription/${requestId}/`;
    await waitFor(
      async () => (await store.list(prefix)).filter((k) => /chunk_\d+\.json$/.test(k)).length >= 2,
      60_000,
      50,
    );
    child.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));
    const checkpointed = (await store.list(prefix))
      .map((k) => /chunk_(\d+)\.json$/.exec(k)?.[1])
      .filter(Boolean)
      .map(Number);
    const mid = await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/${id}`)
      .set('authorization', `Bearer ${key}`);
    expect(mid.body.status).to.equal('running');

    child = await startWorkerProcess(env, callLog);
    const done = await waitFor(
      async () => {
        const r = await request(t.server)
          .get(`/v1/audio/transcriptions/jobs/${id}`)
          .set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      },
      90_000,
      200,
    );
    child.kill('SIGTERM');
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');

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
    const tmp = path.join(t.dataDir, 'tmp', 'batch');
    expect((fs.existsSync(tmp) ? fs.readdirSync(tmp) : []).filter((n) => n.startsWith(id))).to.deep.equal([]);
  });
});

describe('batch: a job whose worker died before taking the lease (pg-boss stately queue)', function () {
  this.timeout(60_000);
  let t: BatchTestApp;
  let boss: PgBoss | undefined;

  before(async () => {
    // Submissions and the sweeper only; the dead worker is a pg-boss client of this test.
    t = await createBatchTestApp({ BATCH_WORKERS: 'false' });
    await t.runtime.start({ workers: false });
  });
  after(async () => {
    await boss?.stop({ graceful: false, wait: true }).catch(() => {});
    await t?.close();
  });

  it('the sweeper closes that job through pg-boss by its id, so a new job for the workflow starts', async () => {
    const key = (await issueKey(t, { ownerId: 'tenant-dead-job', plan: 'pro' })).key;
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: 'http://127.0.0.1:9/never-fetched.wav', request_id: randomId('dead-job') });
    expect(sub.status).to.equal(202);
    const id = sub.body.workflow_id as string;
    const sent = await t.runtime.repo.jobId(id);
    expect(sent, 'the sent job is kept on the workflow').to.match(/^[0-9a-f-]{36}$/);

    // A worker fetches the job (it turns active) and dies before it takes the workflow's lease.
    boss = new PgBoss({ connectionString: t.db.url, schema: t.config.batch.pgBossSchema, supervise: false });
    boss.on('error', () => {});
    await boss.start();
    const [dead] = await boss.fetch<{ workflowId: string }>(WORKFLOW_QUEUE);
    expect(dead.id).to.equal(sent);
    expect(dead.data.workflowId).to.equal(id);
    expect(await t.runtime.sweep(), 'not stale yet').to.equal(0);

    // Long queued, so the sweeper takes it for lost.
    await t.deps
      .db('batch_workflows')
      .where({ id })
      .update({ created_at: t.deps.db.raw("now() - interval '1 hour'") });
    expect(await t.runtime.sweep()).to.equal(1);
    expect((await boss.getJobById(WORKFLOW_QUEUE, dead.id))?.state).to.equal('completed');
    const next = await t.runtime.repo.jobId(id);
    expect(next).to.be.a('string').and.not.equal(dead.id);
    // A second sweep leaves the queued job alone (completing touches active jobs only) and sends none.
    expect(await t.runtime.sweep()).to.equal(1);
    expect(await t.runtime.repo.jobId(id)).to.equal(next);
    expect((await boss.getJobById(WORKFLOW_QUEUE, next!))?.state).to.equal('created');
    const started = await boss.fetch<{ workflowId: string }>(WORKFLOW_QUEUE);
    expect(started.map((j) => [j.id, j.data.workflowId])).to.deep.equal([[next, id]]);
  });
});
