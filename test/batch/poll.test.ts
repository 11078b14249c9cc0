/**
 * Polls present the workflow row and its steps (api/batch/poll.ts), kept on
 * the row until the next change: the body must follow every step and status
 * write, also when steps are written concurrently, keep the interface's
 * field order, be written like every other response (compact JSON), and
 * each of many concurrent polls must get its own tenant's answer.
 */
import { expect } from 'chai';
import request from 'supertest';
import { createBatchTestApp, issueKey, type BatchTestApp } from './helpers.js';
import { chunkStep, STEPS } from '../../api/batch/steps/order.js';

describe('batch: polls', function () {
  this.timeout(30_000);
  let t: BatchTestApp;
  let keyA: string;
  let keyB: string;
  before(async () => {
    t = await createBatchTestApp({ DB_POOL_MAX: '12' }, { start: false });
    keyA = (await issueKey(t, { ownerId: 'tenant-a', plan: 'pro' })).key;
    keyB = (await issueKey(t, { ownerId: 'tenant-b', plan: 'pro' })).key;
  });
  after(async () => t?.close());

  const submit = async (key: string) => {
    const r = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: 'https://example.com/a.mp3' });
    expect(r.status).to.equal(202);
    return r.body.workflow_id as string;
  };
  const poll = (key: string, id: string, path = `/v1/audio/transcriptions/jobs/${id}`) =>
    request(t.server).get(path).set('authorization', `Bearer ${key}`);

  it('lists steps in run order however many chunks a job has (chunk 900 and on stay before aggregate)', async () => {
    const id = await submit(keyA);
    const repo = t.runtime.repo;
    expect(await repo.acquire(id, 'test-runner')).to.not.equal(undefined);
    // A 30-minute recording at the minimum segment_seconds (2) has 900 chunks; 2 hours, 3600.
    const chunks = [0, 1, 899, 900, 901, 1100, 3599];
    for (const step of [
      STEPS.probe,
      STEPS.slice,
      ...chunks.map((i) => chunkStep(i)),
      STEPS.aggregate,
      STEPS.review,
    ]) {
      await repo.stepSet(id, step, 'complete');
    }
    const body = (await poll(keyA, id)).body as { steps: { name: string }[] };
    expect(body.steps.map((s) => s.name)).to.deep.equal([
      'probe',
      'slice',
      ...chunks.map((i) => `transcribe_chunk_${i}`),
      'aggregate',
      'review',
    ]);
  });

  it('follows concurrent step writes, status changes and the output of a completed workflow', async () => {
    const id = await submit(keyA);
    const repo = t.runtime.repo;
    const owner = 'test-runner';
    expect(await repo.acquire(id, owner)).to.not.equal(undefined);
    expect((await poll(keyA, id)).body).to.deep.include({ status: 'running', steps: [] });

    // Chunks written from many connections at once: the last render must see them all.
    const names = Array.from({ length: 24 }, (_, i) => `transcribe_chunk_${i}`);
    await Promise.all(
      names.map(async (_, i) => {
        await repo.stepStart(id, chunkStep(i));
        await repo.stepSet(
          id,
          chunkStep(i),
          i % 5 === 0 ? 'waiting' : 'complete',
          i % 5 === 0 ? 'busy' : undefined,
        );
      }),
    );
    const mid = await poll(keyA, id);
    expect(mid.status).to.equal(200);
    expect(mid.headers['content-type']).to.match(/^application\/json/);
    expect(mid.headers['cache-control']).to.equal('no-store');
    expect(mid.body.steps.map((s: { name: string }) => s.name)).to.deep.equal(names);
    for (const [i, s] of (
      mid.body.steps as { status: string; attempts: number; started_at: string; ended_at: string | null }[]
    ).entries()) {
      expect(s).to.have.all.keys('name', 'status', 'started_at', 'ended_at', 'attempts');
      expect(s.status).to.equal(i % 5 === 0 ? 'waiting' : 'complete');
      expect(s.attempts).to.equal(1);
      expect(new Date(s.started_at).toISOString()).to.equal(s.started_at);
      if (s.status === 'complete') expect(new Date(s.ended_at!).toISOString()).to.equal(s.ended_at);
      else expect(s.ended_at).to.equal(null);
    }

    // Output stays hidden until complete; then only the listed step outputs show.
    await repo.saveOutput(id, {
      probe: { duration_seconds: 1.5 },
      slice: { slices: [] },
      internal: { x: 1 },
    });
    expect((await poll(keyA, id)).body).to.not.have.property('output');
    await repo.saveOutput(id, {
      chunks: [],
      aggregate: { num_segments: 0 },
      review: null,
      report: { runs: 1 },
      result: { text: 'hello', segments: [] },
    });
    expect(await repo.finish(id, owner, 'complete')).to.equal(true);
    const done = await poll(keyA, id, `/${id}`);
    expect(done.body.status).to.equal('complete');
    // Compact JSON like every other response, in the interface's field order.
    expect(done.text).to.equal(JSON.stringify(done.body));
    expect(Object.keys(done.body).join()).to.equal('workflow_id,status,steps,output,error,request_id');
    expect(done.body.error).to.equal(null);
    expect(done.body.output).to.deep.equal({
      probe: { duration_seconds: 1.5 },
      slice: { slices: [] },
      chunks: [],
      aggregate: { num_segments: 0 },
      review: null,
      report: { runs: 1 },
      result: { text: 'hello', segments: [] },
    });

    // A step written after completion (the webhook) shows too.
    await repo.stepSet(id, STEPS.webhook, 'waiting');
    const after = await poll(keyA, id, `/v1/audio/transcriptions/${id}`);
    expect(after.body.steps.at(-1)).to.include({ name: 'webhook', status: 'waiting' });
    expect(after.body.output.result.text).to.equal('hello');
  });

  it('keeps a presented body on the row and drops one presented from a read older than the last change', async () => {
    const id = await submit(keyA);
    const repo = t.runtime.repo;
    const kept = async () =>
      (await repo
        .db('batch_workflows')
        .where({ id })
        .first<{ poll_body: string | null; poll_rev: number }>('poll_body', 'poll_rev'))!;
    const first = await poll(keyA, id);
    // The body is kept once the poll has been answered (it is written after the answer).
    for (let i = 0; i < 50 && (await kept()).poll_body === null; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect((await kept()).poll_body).to.equal(first.text);
    // Polls of an unchanged workflow send the kept text as it is.
    await repo.db('batch_workflows').where({ id }).update({ poll_body: '{"kept":true}' });
    expect((await poll(keyA, id)).text).to.equal('{"kept":true}');

    // A change clears the kept body; a body presented from a read before that change is not kept.
    const [before] = await repo.pollRows([id], ['tenant-a']);
    await repo.acquire(id, 'test-runner');
    expect((await kept()).poll_body).to.equal(null);
    await repo.stepStart(id, STEPS.probe);
    await repo.keepPollBodies([{ id, rev: before!.rev, body: '{"stale":true}' }]);
    expect((await kept()).poll_body).to.equal(null);
    const now = await poll(keyA, id);
    expect(now.body).to.deep.include({ status: 'running' });
    expect(now.body.steps.map((s: { name: string }) => s.name)).to.deep.equal(['probe']);
  });

  it('an errored workflow shows error {name, message} and no output', async () => {
    const id = await submit(keyA);
    await t.runtime.repo.acquire(id, 'test-runner');
    await t.runtime.repo.finish(id, 'test-runner', 'errored', {
      name: 'AudioFetchError',
      message: 'HTTP 404',
    });
    const r = await poll(keyA, id);
    expect(r.text).to.equal(JSON.stringify(r.body));
    expect(Object.keys(r.body)).to.deep.equal(['workflow_id', 'status', 'steps', 'error', 'request_id']);
    expect(r.body).to.deep.include({
      status: 'errored',
      error: { name: 'AudioFetchError', message: 'HTTP 404' },
    });
    expect(r.body).to.not.have.property('output');
  });

  it('answers each of many concurrent polls for its own tenant', async () => {
    const [a1, a2, b1] = [await submit(keyA), await submit(keyA), await submit(keyB)];
    const unknown = `cf_${'e'.repeat(64)}`;
    const cases: [string, string, number][] = [
      [keyA, a1, 200],
      [keyB, a1, 404],
      [keyA, a2, 200],
      [keyB, b1, 200],
      [keyA, b1, 404],
      [keyA, unknown, 404],
      [keyB, b1, 200],
      [keyA, a1, 200],
    ];
    // Sent together so that they land in the same event-loop turns of the server.
    const results = await Promise.all(
      Array.from({ length: 5 }, () => cases.map(([key, id]) => poll(key, id))).flat(),
    );
    results.forEach((r, n) => {
      const [, id, status] = cases[n % cases.length];
      expect(r.status, `${n}`).to.equal(status);
      if (status === 200) expect(r.body.workflow_id).to.equal(id);
      else expect(r.body.error).to.be.a('string');
    });
  });
});
