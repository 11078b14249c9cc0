/**
 * Cancelling batch jobs (issue 41): a tenant cancels its own job with
 * DELETE, and revoking a key terminates its queued and running jobs, so
 * nothing more of them runs, is billed to it or reaches its webhooks
 * (before, a revoked key's 4 queued jobs ran, were billed 8 s and delivered).
 */
import http from 'node:http';
import type net from 'node:net';
import { expect } from 'chai';
import request from 'supertest';
import { ADMIN_TOKEN } from '../helpers/app.js';
import { BatchRuntime, WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import { tenantStore } from '../../api/batch/storage/index.js';
import { issueKey, pgBossClient, batchSuite, waitFor } from './helpers.js';

const JOBS = '/v1/audio/transcriptions/jobs';

describe('batch: cancelling jobs', function () {
  this.timeout(120_000);
  let slow: http.Server;
  let slowUrl: string;
  let elsewhere: BatchRuntime | undefined;
  const sockets = new Set<net.Socket>();
  const s = batchSuite({
    prefix: 'cancel',
    recordings: {
      'short.wav': { clips: ['librivox-austen-0880.wav'] },
      'longer.wav': { clips: ['jfk.wav', 'librivox-austen-0870.wav', 'librivox-austen-0890.wav'] },
    },
    run: 'producer',
  });
  before(async () => {
    // Answers 200, then a byte every second: a job that stays running.
    slow = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': '1000000' });
      const timer = setInterval(() => res.write('R'), 1000);
      res.on('close', () => clearInterval(timer));
    });
    slow.on('connection', (c) => (sockets.add(c), c.on('close', () => sockets.delete(c))));
    await new Promise<void>((r) => slow.listen(0, '127.0.0.1', () => r()));
    slowUrl = `http://127.0.0.1:${(slow.address() as net.AddressInfo).port}/stall.wav`;
  });
  s.cleanup(async () => {
    await elsewhere?.stop();
    for (const c of sockets) c.destroy();
    await new Promise((r) => slow.close(r));
  });

  const submit = async (key: string, body: object) => {
    const r = await request(s.t.server).post(JOBS).set('authorization', `Bearer ${key}`).send(body);
    expect(r.status, JSON.stringify(r.body)).to.equal(202);
    return r.body.workflow_id as string;
  };
  const row = (id: string) => s.t.deps.db('batch_workflows').where({ id }).first();
  const billed = async (keyId: string) =>
    Number(
      (await s.t.deps.db('usage_events').where({ key_id: keyId }).sum('audio_seconds as s').first())?.s ?? 0,
    );

  it("DELETE cancels the tenant's own queued job; others get 404; again answers it as it is", async () => {
    const owner = await issueKey(s.t, { ownerId: 'tenant-cancel', plan: 'pro' });
    const other = await issueKey(s.t, { ownerId: 'tenant-stranger', plan: 'pro' });
    const id = await submit(owner.key, { audio_url: `${s.files.url}/short.wav` });
    const foreign = await request(s.t.server)
      .delete(`${JOBS}/${id}`)
      .set('authorization', `Bearer ${other.key}`);
    expect(foreign.status).to.equal(404);
    expect(foreign.body.code).to.equal('workflow_not_found');
    const r = await request(s.t.server).delete(`${JOBS}/${id}`).set('authorization', `Bearer ${owner.key}`);
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.include({ workflow_id: id, status: 'terminated' });
    expect(r.body.error.name).to.equal('cancelled');
    const again = await request(s.t.server)
      .delete(`${JOBS}/${id}`)
      .set('authorization', `Bearer ${owner.key}`);
    expect(again.status).to.equal(200);
    expect(again.body.status).to.equal('terminated');
    const poll = await request(s.t.server).get(`${JOBS}/${id}`).set('authorization', `Bearer ${owner.key}`);
    expect(poll.body.status).to.equal('terminated');
  });

  it('revoking a key terminates its queued jobs: workers never run them, nothing is billed or delivered', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-revoked', plan: 'pro' });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++)
      ids.push(
        await submit(k.key, {
          audio_url: `${s.files.url}/short.wav`,
          webhook_url: `${s.files.url}/revoked-hook`,
        }),
      );
    const res = await request(s.t.server)
      .delete(`/v1/external-transcription/keys/${k.id}`)
      .set('authorization', `Bearer ${ADMIN_TOKEN}`);
    expect(res.status).to.equal(200);
    for (const id of ids) expect((await row(id)).status).to.equal('terminated');
    // The race the admin route cannot see: a job accepted while its key was being revoked (its body
    // still arriving when the revocation ended the key's jobs). The store revokes the key alone here.
    const late = await issueKey(s.t, { ownerId: 'tenant-revoked-late', plan: 'pro' });
    const lateJob = await submit(late.key, {
      audio_url: `${s.files.url}/short.wav`,
      webhook_url: `${s.files.url}/revoked-hook`,
    });
    await s.t.deps.keys.revoke(late.id);
    // Workers start now: the queued jobs of the revoked keys are not run.
    await s.t.runtime.stop();
    await s.t.runtime.start({ workers: true });
    const other = await issueKey(s.t, { ownerId: 'tenant-after-revocation', plan: 'pro' });
    const control = await submit(other.key, { audio_url: `${s.files.url}/short.wav` });
    await waitFor(async () => (await row(control)).status === 'complete', 60_000, 200);
    for (const id of ids) expect((await row(id)).status).to.equal('terminated');
    const lateRow = await waitFor(
      async () => {
        const r = await row(lateJob);
        return r.status !== 'queued' ? r : undefined;
      },
      30_000,
      100,
    );
    expect(lateRow.status).to.equal('terminated');
    expect(lateRow.error.name).to.equal('key_revoked');
    expect(await billed(late.id)).to.equal(0);
    expect(await billed(k.id)).to.equal(0);
    expect(s.files.posts.filter((p) => p.path === '/revoked-hook')).to.deep.equal([]);
  });

  it('a running job cancelled stops (its download is dropped) and stays terminated; 409 once finished', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-running', plan: 'pro' });
    const id = await submit(k.key, { audio_url: slowUrl });
    await waitFor(async () => sockets.size > 0 && (await row(id)).status === 'running', 30_000, 100);
    const r = await request(s.t.server).delete(`${JOBS}/${id}`).set('authorization', `Bearer ${k.key}`);
    expect(r.status).to.equal(200);
    expect(r.body.status).to.equal('terminated');
    await waitFor(async () => sockets.size === 0, 15_000, 100);
    // The run has ended: no job of the workflow is queued, retrying or running (pg-boss's API).
    const boss = await pgBossClient(s.t);
    try {
      await waitFor(
        async () =>
          (await boss.findJobs(WORKFLOW_QUEUE, { key: id })).every(
            (j) => !['created', 'retry', 'active'].includes(j.state),
          ),
        30_000,
        100,
      );
    } finally {
      await boss.stop({ graceful: false });
    }
    expect((await row(id)).status).to.equal('terminated');

    const done = await submit(k.key, { audio_url: `${s.files.url}/short.wav` });
    await waitFor(async () => (await row(done)).status === 'complete', 60_000, 200);
    const late = await request(s.t.server).delete(`${JOBS}/${done}`).set('authorization', `Bearer ${k.key}`);
    expect(late.status).to.equal(409);
    expect(late.body.code).to.equal('workflow_finished');
  });

  it('a job that has its result is not cancelled in the moment before it is marked complete: 409, left to finish and deliver its webhook', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-late-cancel', plan: 'pro' });
    const id = await submit(k.key, { audio_url: `${s.files.url}/short.wav` });
    await waitFor(async () => (await row(id)).status === 'complete', 60_000, 200);
    const billedBefore = await billed(k.id);
    // The run's last moments: result saved and billed, webhook step waiting, not yet marked complete
    // (workflow.ts between runSteps and finish; a trial cancelled there 2 times in 24). Put back here.
    await s.t.deps.db('batch_workflows').where({ id }).update({ status: 'running', ended_at: null });
    const r = await request(s.t.server).delete(`${JOBS}/${id}`).set('authorization', `Bearer ${k.key}`);
    // Before: 200 terminated `cancelled`, yet billed, its result hidden and its webhook never sent.
    expect(r.status, JSON.stringify(r.body)).to.equal(409);
    expect(r.body.code).to.equal('workflow_finished');
    expect((await row(id)).status).to.equal('running');
    // Revoking its key leaves it too.
    expect(await s.t.runtime.cancelKeyJobs(k.id)).to.equal(0);
    expect((await row(id)).status).to.equal('running');
    expect(await billed(k.id)).to.equal(billedBefore);
    await s.t.deps
      .db('batch_workflows')
      .where({ id })
      .update({ status: 'complete', ended_at: s.t.deps.db.fn.now() });
  });

  it('a cancelled job is billed for the chunks it transcribed; resubmitted, it completes billed once in all', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-free-ride', plan: 'pro' });
    const requestId = 'free-ride';
    const body = {
      audio_url: `${s.files.url}/longer.wav`,
      request_id: requestId,
      segment_seconds: 2,
      concurrency: 1,
    };
    const id = await submit(k.key, body);
    const store = tenantStore(s.t.runtime.store, 'tenant-free-ride');
    await waitFor(
      async () =>
        (await store.list(`transcription/${requestId}/`)).filter((x) => /chunk_\d+\.json$/.test(x)).length >=
        2,
      60_000,
      50,
    );
    const r = await request(s.t.server).delete(`${JOBS}/${id}`).set('authorization', `Bearer ${k.key}`);
    expect(r.status).to.equal(200);
    // Before: nothing was billed, yet the chunks could be read (GET /r2/…/chunk_0.json) or reused.
    const cancelled = await billed(k.id);
    expect(cancelled).to.be.greaterThan(0);
    const again = await submit(k.key, body);
    await waitFor(async () => (await row(again)).status === 'complete', 90_000, 200);
    const total = await billed(k.id);
    const duration = (await row(again)).output.probe.duration_seconds as number;
    expect(total).to.be.closeTo(duration, 0.05);
  });

  it('a job running in another process stops at the next heartbeat of its cancelled pg-boss job', async () => {
    // This app answers the DELETE; the run is another runtime's, which only pg-boss tells.
    await s.t.runtime.stop();
    await s.t.runtime.start({ workers: false });
    elsewhere = new BatchRuntime({ ...s.t.deps, store: s.t.runtime.store, outbound: s.t.runtime.outbound });
    await elsewhere.start({ workers: true });
    const k = await issueKey(s.t, { ownerId: 'tenant-cancel-elsewhere', plan: 'pro' });
    const id = await submit(k.key, { audio_url: slowUrl });
    await waitFor(async () => sockets.size > 0 && (await row(id)).status === 'running', 30_000, 100);
    const at = Date.now();
    const r = await request(s.t.server).delete(`${JOBS}/${id}`).set('authorization', `Bearer ${k.key}`);
    expect(r.status).to.equal(200);
    // The run drops its download once its heartbeat finds the job cancelled (every half heartbeat).
    await waitFor(async () => sockets.size === 0, 30_000, 100);
    const stoppedAfter = (Date.now() - at) / 1000;
    expect(stoppedAfter, 'seconds until the run stopped').to.be.below(
      s.t.config.batch.heartbeatSeconds / 2 + 3,
    );
    expect((await row(id)).status).to.equal('terminated');
    expect((await row(id)).error.name).to.equal('cancelled');
  });
});
