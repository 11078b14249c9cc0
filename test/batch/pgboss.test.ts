/**
 * What the batch plane keeps beside pg-boss 12's own job state
 * (docs/decisions/batch.md, "pg-boss 12"): the unfinished workflows found
 * when a pg-boss schema is first used are queued in it once (the pg-boss 10
 * schema's jobs are not carried over), and a workflow whose job pg-boss
 * gave up on (dead-letter queue) is errored instead of left running.
 */
import { expect } from 'chai';
import type { PgBoss } from 'pg-boss';
import request from 'supertest';
import { BatchRuntime, WORKFLOW_DEAD_QUEUE, WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import { issueKey, pgBossClient, batchSuite, waitFor } from './helpers.js';

describe('batch: pg-boss 12 beside our workflow rows', function () {
  this.timeout(90_000);
  let boss: PgBoss | undefined;
  const runtimes: BatchRuntime[] = [];
  const s = batchSuite({
    prefix: 'pgboss',
    recordings: { 'clip.wav': { clips: ['jfk.wav'], gap: 0.5 } },
    run: 'none',
  });
  s.cleanup(async () => {
    for (const r of runtimes) await r.stop();
    await boss?.stop({ graceful: false }).catch(() => {});
  });

  const row = (id: string) => s.t.deps.db('batch_workflows').where({ id }).first();
  const runtime = () => {
    const r = new BatchRuntime({ ...s.t.deps, store: s.t.runtime.store, outbound: s.t.runtime.outbound });
    runtimes.push(r);
    return r;
  };
  const jobsOf = async (id: string) =>
    (await boss!.findJobs(WORKFLOW_QUEUE, { key: id })).map((j) => j.state);
  const submit = async (key: string, body: object) => {
    const r = await request(s.t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send(body);
    expect(r.status, JSON.stringify(r.body)).to.equal(202);
    return r.body.workflow_id as string;
  };
  /** The workflows lose their jobs here, as an earlier pg-boss schema's were left behind. */
  const dropJobs = async (...ids: string[]) => {
    for (const id of ids) {
      const jobs = await boss!.findJobs(WORKFLOW_QUEUE, { key: id });
      if (jobs.length)
        await boss!.deleteJob(
          WORKFLOW_QUEUE,
          jobs.map((j) => j.id),
        );
    }
  };

  it('queues the unfinished workflows in a new pg-boss schema once, given back, and runs them', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-handoff', plan: 'pro' });
    await s.t.runtime.start({ workers: false });
    boss = await pgBossClient(s.t);
    const schema = s.t.config.batch.pgBossSchema;
    expect(
      await s.t.deps.db('batch_pgboss_handoffs').where({ schema }).first(),
      'recorded at the first start',
    ).to.not.equal(undefined);
    // A run of the old version was in progress, two workflows still queued; none has a job in this schema.
    const body = { audio_url: `${s.files.url}/clip.wav` };
    const running = await submit(k.key, body);
    const queued = await submit(k.key, body);
    const later = await submit(k.key, body);
    await dropJobs(running, queued, later);
    await s.t.deps
      .db('batch_workflows')
      .where({ id: running })
      .update({ status: 'running', run_owner: '4242-deadbeef-1' });

    // Handed off already: a later start queues nothing (a workflow without a job is not revived here).
    await runtime().start({ workers: false });
    for (const id of [running, queued, later]) expect(await jobsOf(id)).to.deep.equal([]);

    // Not yet handed off (a new schema): every unfinished workflow is queued, the old run's given back.
    await s.t.deps.db('batch_pgboss_handoffs').delete();
    await runtime().start({ workers: false });
    for (const id of [running, queued, later]) expect(await jobsOf(id)).to.deep.equal(['created']);
    expect((await row(running)).run_owner, 'given back').to.equal(null);
    expect((await s.t.deps.db('batch_pgboss_handoffs').where({ schema }).first()).workflows).to.equal(3);

    // A hand-off cut short (its record missing) is finished by the next process, without a second job.
    await s.t.deps.db('batch_pgboss_handoffs').delete();
    await dropJobs(later);
    await runtime().start({ workers: false });
    for (const id of [running, queued, later]) expect(await jobsOf(id)).to.deep.equal(['created']);
    expect((await s.t.deps.db('batch_pgboss_handoffs').where({ schema }).first()).workflows).to.equal(1);

    await runtime().start({ workers: true });
    for (const id of [running, queued, later]) {
      const done = await waitFor(async () => {
        const r = await row(id);
        return r.status === 'complete' || r.status === 'errored' ? r : undefined;
      }, 60_000);
      expect(done.status, JSON.stringify(done.error)).to.equal('complete');
      expect(done.lapses, 'the old run is not counted as a crash').to.equal(0);
    }
  });

  it('a workflow whose job failed every attempt is errored from the dead-letter queue, and its webhook sent', async () => {
    const k = await issueKey(s.t, { ownerId: 'tenant-dead-letter', plan: 'pro' });
    // Only this test's pg-boss client takes workflow jobs: no worker runs them.
    for (const r of runtimes.splice(0)) await r.stop();
    const id = await submit(k.key, {
      audio_url: `${s.files.url}/clip.wav`,
      webhook_url: `${s.files.url}/dead-hook`,
    });
    // Every attempt fails (retryLimit 3: four of them), as a run whose handler keeps throwing would.
    let attempts = 0;
    await waitFor(
      async () => {
        const [job] = await boss!.fetch<{ workflowId: string }>(WORKFLOW_QUEUE);
        if (job) {
          expect(job.data.workflowId).to.equal(id);
          await boss!.fail(WORKFLOW_QUEUE, job, { message: 'handler failed' });
          attempts++;
        }
        return (await boss!.findJobs(WORKFLOW_QUEUE, { key: id }))[0]?.state === 'failed';
      },
      30_000,
      200,
    );
    expect(attempts).to.equal(4);
    expect((await row(id)).status, 'pg-boss alone does not end it').to.equal('queued');
    const [dead] = await boss!.findJobs<{ workflowId: string }>(WORKFLOW_DEAD_QUEUE);
    expect(dead.data.workflowId).to.equal(id);

    const worker = runtime();
    await worker.start({ workers: true });
    const done = await waitFor(async () => {
      const r = await row(id);
      return r.status !== 'queued' ? r : undefined;
    }, 30_000);
    expect(done.status).to.equal('errored');
    expect(done.error.name).to.equal('workflow_failed');
    const poll = await request(s.t.server)
      .get(`/v1/audio/transcriptions/jobs/${id}`)
      .set('authorization', `Bearer ${k.key}`);
    expect(poll.body.status).to.equal('errored');
    expect(poll.body.error.name).to.equal('workflow_failed');
    await waitFor(async () => s.files.posts.some((p) => p.path === '/dead-hook'), 30_000);
    const hook = s.files.posts.find((p) => p.path === '/dead-hook')!;
    expect(JSON.parse(hook.body).type).to.equal('transcription.failed');
  });
});
