/**
 * Segment latency of one tenant while another key saturates its share
 * (issue 41 target: at most 1.5x its latency alone). One API (the real
 * middleware chain, Postgres, the built-in engine) in this process; key A
 * keeps `--backlog` uploads of an 11 s clip in flight, key B sends the same
 * clip now and then. Prints B's median alone, B's median beside A's
 * backlog, their ratio, and A's answers by status.
 *
 *   npx tsx test/bench/api/segmentFairness.ts [--backlog=20] [--rounds=5]
 */
import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { createTestApp, issueKey } from '../../helpers/app.js';

const arg = (name: string, fallback: number) =>
  Number(process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
const backlog = arg('backlog', 20);
const rounds = arg('rounds', 5);
const clip = fs.readFileSync(path.resolve('test/audio/jfk.wav'));

const t = await createTestApp({ LOG_LEVEL: 'warn', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const a = (await issueKey(t, { ownerId: 'bench-heavy', plan: 'pro' })).key;
const b = (await issueKey(t, { ownerId: 'bench-light', plan: 'pro' })).key;

const upload = async (key: string) => {
  const t0 = performance.now();
  const res = await request(t.server)
    .post('/v1/audio/transcriptions')
    .set('authorization', `Bearer ${key}`)
    .attach('file', clip, 'clip.wav');
  return { status: res.status, ms: performance.now() - t0 };
};
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

await upload(b); // warm-up
const alone: number[] = [];
for (let i = 0; i < rounds; i++) alone.push((await upload(b)).ms);

// A keeps `backlog` uploads in flight for as long as B measures.
let stop = false;
const statuses = new Map<number, number>();
const heavy = Array.from({ length: backlog }, async () => {
  while (!stop) {
    const r = await upload(a);
    statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
  }
});
await new Promise((r) => setTimeout(r, 3000));
const beside: number[] = [];
for (let i = 0; i < rounds; i++) beside.push((await upload(b)).ms);
stop = true;
await Promise.all(heavy);
await t.close();

const m0 = median(alone);
const m1 = median(beside);
console.log(
  `segment fairness: 11 s clip (jfk.wav), ${rounds} rounds, key A holding ${backlog} uploads in flight`,
);
console.log(`  B alone          median ${Math.round(m0)} ms  (${alone.map(Math.round).join(', ')})`);
console.log(`  B beside A       median ${Math.round(m1)} ms  (${beside.map(Math.round).join(', ')})`);
console.log(`  ratio            ${(m1 / m0).toFixed(2)}x (target <= 1.5x)`);
console.log(`  A's answers      ${[...statuses].map(([s, n]) => `${s}: ${n}`).join(', ')}`);
