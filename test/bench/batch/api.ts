/**
 * Batch API throughput on real Postgres and pg-boss: accepted submissions per
 * second (POST /v1/audio/transcriptions/jobs → 202, each one a workflow row
 * and a pg-boss job) and polls per second (GET …/jobs/{id}). Workers are off
 * so only the API path is measured.
 *
 * Usage: npx tsx test/bench/batch/api.ts [seconds=10] [connections=32]
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import autocannon from 'autocannon';
import request from 'supertest';
import { createBatchTestApp, issueKey } from '../../batch/helpers.js';

const seconds = Number(process.argv[2] ?? 10);
const connections = Number(process.argv[3] ?? 32);

const t = await createBatchTestApp({
  LOG_LEVEL: 'warn',
  BATCH_WORKERS: 'false',
  DB_POOL_MAX: '16',
  PLANS_JSON: JSON.stringify({ bench: { maxRequestsPerMinute: 100_000_000 } }),
  POLL_REQUESTS_PER_MINUTE: '100000000',
});
await t.runtime.start({ workers: false });
const key = (await issueKey(t, { ownerId: 'bench', plan: 'bench' })).key;
const server = http.createServer(t.app.callback());
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

function run(opts: autocannon.Options): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon(opts, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

const submit = await run({
  url: `${base}/v1/audio/transcriptions/jobs`,
  method: 'POST',
  connections,
  duration: seconds,
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ audio_url: 'https://example.com/audio.mp3', segment_seconds: 300, concurrency: 2 }),
});
// Workers are off: every job is still queued (pg-boss's own count), one per row: each is sent in its row's
// transaction. Submissions autocannon gave up on at the end may still be committing: counted once both agree.
const rows = async () =>
  Number((await t.deps.db('batch_workflows').count<{ count: string }[]>('* as count'))[0].count);
let accepted = await rows();
let queued = await t.runtime.workflowJobsPending();
for (let tries = 0; accepted !== queued && tries < 50; tries++) {
  await new Promise((r) => setTimeout(r, 100));
  accepted = await rows();
  queued = await t.runtime.workflowJobsPending();
}
console.log(
  `submissions: ${(submit['2xx'] / seconds).toFixed(0)} accepted/s (${submit['2xx']} in ${seconds} s, ${connections} connections, ` +
    `non-2xx ${submit.non2xx}, latency p50 ${submit.latency.p50} ms p99 ${submit.latency.p99} ms); rows ${accepted}, pg-boss jobs ${queued}`,
);

const sub = await request(t.server)
  .post('/v1/audio/transcriptions/jobs')
  .set('authorization', `Bearer ${key}`)
  .send({ audio_url: 'https://example.com/audio.mp3' });
const poll = await run({
  url: `${base}/v1/audio/transcriptions/jobs/${sub.body.workflow_id}`,
  connections,
  duration: seconds,
  headers: { authorization: `Bearer ${key}` },
});
console.log(
  `polls: ${(poll['2xx'] / seconds).toFixed(0)} /s (${poll['2xx']} in ${seconds} s, non-2xx ${poll.non2xx}, latency p50 ${poll.latency.p50} ms p99 ${poll.latency.p99} ms)`,
);

server.close();
await t.close();
process.exit(0);
