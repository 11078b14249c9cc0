/** Webhook delivery: signature, retries with backoff and jitter, attempts recorded, 410 stops. */
import fs from 'node:fs';
import { expect } from 'chai';
import request from 'supertest';
import { Webhook } from 'standardwebhooks';
import { backoffSeconds } from '../../api/batch/webhook.js';
import { signedHeaders, tenantSecret } from '../../api/batch/signing.js';
import { batchConfig } from '../../shared/config/batch.js';
import { WEBHOOK_QUEUE } from '../../api/batch/runtime.js';
import {
  createBatchTestApp,
  issueKey,
  pgBossClient,
  startFileServer,
  TEST_WEBHOOK_SECRET,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from './helpers.js';
import { audioDir, tmpDir } from './helpers.js';

describe('batch: webhook backoff and signing', () => {
  it('backs off exponentially with jitter, capped, spanning hours by default', () => {
    const cfg = batchConfig({}).webhook;
    expect(backoffSeconds(1, cfg, () => 1)).to.equal(30);
    expect(backoffSeconds(2, cfg, () => 1)).to.equal(60);
    expect(backoffSeconds(3, cfg, () => 0)).to.equal(60); // half of 120 at the lowest jitter
    expect(backoffSeconds(30, cfg, () => 1)).to.equal(cfg.maxDelaySeconds);
    let total = 0;
    for (let a = 1; a < cfg.maxAttempts; a++) total += backoffSeconds(a, cfg, () => 0.5);
    expect(total / 3600).to.be.above(3);
    const samples = new Set(Array.from({ length: 20 }, () => backoffSeconds(4, cfg)));
    expect(samples.size).to.be.above(1);
  });

  it('signs id.timestamp.body as Standard Webhooks v1', () => {
    const at = new Date('2026-11-21T20:00:00Z');
    const h = signedHeaders(TEST_WEBHOOK_SECRET, 'msg_1', at, '{"a":1}');
    expect(h['webhook-id']).to.equal('msg_1');
    expect(h['webhook-timestamp']).to.equal(String(at.getTime() / 1000));
    expect(h['webhook-signature']).to.match(/^v1,[A-Za-z0-9+/=]+$/);
    const wh = new Webhook(TEST_WEBHOOK_SECRET);
    expect(() =>
      wh.verify('{"a":2}', { ...h, 'webhook-timestamp': String(Math.floor(Date.now() / 1000)) }),
    ).to.throw();
  });

  it("each tenant has its own key, derived from the operator's secret; during rotation every message carries both", () => {
    const a = tenantSecret(TEST_WEBHOOK_SECRET, 'tenant-a');
    expect(a)
      .to.match(/^whsec_/)
      .and.equal(tenantSecret(TEST_WEBHOOK_SECRET, 'tenant-a'));
    expect(tenantSecret(TEST_WEBHOOK_SECRET, 'tenant-b')).to.not.equal(a);
    const next = `whsec_${Buffer.from('the-next-operator-secret-0123456789').toString('base64')}`;
    const at = new Date();
    const body = '{"a":1}';
    const h = signedHeaders([tenantSecret(next, 'tenant-a'), a], 'msg_2', at, body);
    expect(h['webhook-signature'].split(' ')).to.have.length(2);
    new Webhook(a).verify(body, h); // receivers still on the old key
    new Webhook(tenantSecret(next, 'tenant-a')).verify(body, h); // and those already moved
    expect(() => new Webhook(tenantSecret(next, 'tenant-b')).verify(body, h)).to.throw();
  });
});

describe('batch: webhook delivery', function () {
  this.timeout(60_000);
  let t: BatchTestApp;
  let files: FileServer;
  let key: string;
  const dir = tmpDir('batch-webhook-');
  before(async () => {
    fs.copyFileSync(`${audioDir}/librivox-austen-0880.wav`, `${dir}/short.wav`);
    files = await startFileServer(dir);
    t = await createBatchTestApp(
      {},
      { start: true, overrides: { batch: { webhook: { recoverAfterSeconds: 5 } } } },
    );
    key = (await issueKey(t, { ownerId: 'tenant-w', plan: 'pro' })).key;
    secret = await tenantSecretOf(key);
  });
  let secret: string;
  const tenantSecretOf = async (k: string) => {
    const r = await request(t.server).get('/v1/webhooks/secret').set('authorization', `Bearer ${k}`);
    expect(r.status).to.equal(200);
    return r.body.secret as string;
  };
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function run(hookPath: string, as = key) {
    const r = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${as}`)
      .send({ audio_url: `${files.url}/short.wav`, webhook_url: `${files.url}${hookPath}` });
    expect(r.status).to.equal(202);
    return r.body.workflow_id as string;
  }
  const deliveries = (id: string) =>
    t.deps.db('batch_webhook_deliveries').where({ workflow_id: id }).orderBy('attempt');
  /**
   * The workflow's webhook jobs once none of them is queued, waiting to be
   * retried or running (read through pg-boss's API): no attempt is on its way.
   */
  async function settledWebhookJobs(id: string) {
    const boss = await pgBossClient(t);
    try {
      return await waitFor(
        async () => {
          const jobs = await boss.findJobs(WEBHOOK_QUEUE, { data: { workflowId: id } });
          const open = jobs.filter((j) => ['created', 'retry', 'active'].includes(j.state));
          return jobs.length > 0 && open.length === 0 ? jobs : undefined;
        },
        30_000,
        100,
      );
    } finally {
      await boss.stop({ graceful: false });
    }
  }
  /** The deliveries of a job once there is one. */
  const firstDeliveries = (id: string) =>
    waitFor(
      async () => {
        const d = await deliveries(id);
        return d.length ? d : undefined;
      },
      30_000,
      200,
    );

  it('retries failed deliveries with growing delays, recording every attempt, until one succeeds', async () => {
    files.postStatuses.push(500, 503);
    const id = await run('/retry');
    const rows = await waitFor(
      async () => {
        const d = await deliveries(id);
        return d.length === 3 ? d : undefined;
      },
      30_000,
      200,
    );
    expect(rows.map((r) => r.outcome)).to.deep.equal(['failed', 'failed', 'delivered']);
    expect(rows.map((r) => r.status_code)).to.deep.equal([500, 503, 200]);
    expect(rows[0].next_attempt_at).to.be.instanceOf(Date);
    const calls = files.posts.filter((p) => p.path === '/retry');
    expect(calls).to.have.length(3);
    // Same message id on every attempt so receivers can de-duplicate; each verifies.
    expect(new Set(calls.map((c) => c.headers['webhook-id'])).size).to.equal(1);
    for (const c of calls) new Webhook(secret).verify(c.body, c.headers as Record<string, string>);
    // Signed with the tenant's key, not the operator's secret.
    expect(() =>
      new Webhook(TEST_WEBHOOK_SECRET).verify(calls[0].body, calls[0].headers as Record<string, string>),
    ).to.throw();
    const poll = await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/${id}`)
      .set('authorization', `Bearer ${key}`);
    const step = poll.body.steps.find((s: { name: string }) => s.name === 'webhook');
    expect(step).to.include({ status: 'complete', attempts: 3 });
  });

  it('another tenant cannot send a receiver a message that verifies; the payload names the owner and key', async () => {
    const other = await issueKey(t, { ownerId: 'tenant-intruder', plan: 'pro' });
    const id = await run('/receiver-of-w', other.key);
    const rows = await firstDeliveries(id);
    expect(rows[0].outcome).to.equal('delivered');
    const call = files.posts.find((p) => p.path === '/receiver-of-w')!;
    const headers = call.headers as Record<string, string>;
    // tenant-w's receiver, verifying with tenant-w's secret, refuses it (before: one secret signed every tenant's).
    expect(() => new Webhook(secret).verify(call.body, headers)).to.throw();
    const payload = new Webhook(await tenantSecretOf(other.key)).verify(call.body, headers) as {
      data: { owner_id: string; key_id: string };
    };
    expect(payload.data).to.include({ owner_id: 'tenant-intruder', key_id: other.id });
  });

  it('a 200 with a large body is a delivery (the receipt is the status)', async () => {
    const id = await run('/big');
    const rows = await firstDeliveries(id);
    expect(rows.map((r) => [r.outcome, r.status_code])).to.deep.equal([['delivered', 200]]);
  });

  it("a receiver that never answers holds only its share: another tenant's webhook leaves within 2 s of its job's end", async () => {
    const slowTenant = (await issueKey(t, { ownerId: 'tenant-slow-receiver', plan: 'pro' })).key;
    for (let i = 0; i < 6; i++) await run(`/hang-${i}`, slowTenant);
    await waitFor(async () => files.posts.filter((p) => p.path.startsWith('/hang')).length >= 2, 30_000, 50);
    const other = (await issueKey(t, { ownerId: 'tenant-fast-receiver', plan: 'pro' })).key;
    const id = await run('/fast', other);
    const call = await waitFor(async () => files.posts.find((p) => p.path === '/fast'), 30_000, 20);
    const row = await t.deps.db('batch_workflows').where({ id }).first();
    const after = call.at - new Date(row.ended_at).getTime();
    // Before: one delivery at a time per process, each hanging one for its 10 s timeout.
    expect(after, "ms from the job's end to its webhook").to.be.below(2000);
  });

  it('stops at 410 Gone', async () => {
    files.postStatuses.push(410);
    const id = await run('/gone');
    await waitFor(async () => (await deliveries(id)).length === 1, 30_000, 200);
    // No retry is queued; a sweep (which would queue a lost delivery again) sends nothing more either.
    await settledWebhookJobs(id);
    await t.runtime.sweep();
    await settledWebhookJobs(id);
    const rows = await deliveries(id);
    expect(rows).to.have.length(1);
    expect(rows[0]).to.include({ outcome: 'gone', status_code: 410 });
  });

  it('a delivery lost with its process (job ended, nothing sent, or a retry never queued) is sent by the sweeper', async () => {
    const id = await run('/lost');
    await waitFor(async () => (await deliveries(id)).length === 1, 30_000, 200);
    const sent = () => files.posts.filter((p) => p.path === '/lost').length;
    expect(sent()).to.equal(1);
    // The worker finishes the step after it records the delivery: the loss is simulated once it has.
    await settledWebhookJobs(id);
    // The state a process killed between finishing the job and queueing its delivery leaves behind.
    await t.deps.db('batch_webhook_deliveries').where({ workflow_id: id }).delete();
    await t.deps
      .db('batch_steps')
      .where({ workflow_id: id, name: 'webhook' })
      .update({ status: 'waiting', ended_at: null });
    await t.deps
      .db('batch_workflows')
      .where({ id })
      .update({ ended_at: t.deps.db.raw("now() - interval '1 hour'") });
    const recovered = await waitFor(
      async () => {
        const d = await deliveries(id);
        return d.length === 1 ? d : undefined;
      },
      30_000,
      200,
    );
    expect(recovered[0]).to.include({ attempt: 1, outcome: 'delivered' });
    expect(sent()).to.equal(2);
    await settledWebhookJobs(id);

    // A failed attempt whose retry was never queued (the process died after recording it).
    await t.deps
      .db('batch_webhook_deliveries')
      .where({ workflow_id: id })
      .update({
        outcome: 'failed',
        status_code: 500,
        next_attempt_at: t.deps.db.raw("now() - interval '1 hour'"),
      });
    await t.deps
      .db('batch_steps')
      .where({ workflow_id: id, name: 'webhook' })
      .update({ status: 'waiting', ended_at: null });
    // Sweeps that find it again before its job ran queue no second job (which could send it twice).
    await Promise.all([t.runtime.sweep(), t.runtime.sweep(), t.runtime.sweep()]);
    const boss = await pgBossClient(t);
    const queued = await boss.findJobs(WEBHOOK_QUEUE, { data: { workflowId: id, attempt: 2 } });
    await boss.stop({ graceful: false });
    expect(queued).to.have.length(1);
    const retried = await waitFor(
      async () => {
        const d = await deliveries(id);
        return d.length === 2 ? d : undefined;
      },
      30_000,
      200,
    );
    expect(retried.map((r) => [r.attempt, r.outcome])).to.deep.equal([
      [1, 'failed'],
      [2, 'delivered'],
    ]);
    expect(sent()).to.equal(3);
    // Nothing more once delivered: no retry is queued, and the sweeper leaves finished deliveries alone.
    await settledWebhookJobs(id);
    await t.runtime.sweep();
    await settledWebhookJobs(id);
    expect(sent()).to.equal(3);
    const poll = await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/${id}`)
      .set('authorization', `Bearer ${key}`);
    expect(poll.body.steps.find((s: { name: string }) => s.name === 'webhook')).to.include({
      status: 'complete',
    });
  });
});
