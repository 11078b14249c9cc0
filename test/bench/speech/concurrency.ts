/**
 * 16 concurrent clients against the segment endpoint (built-in engine, one
 * decoder thread per core), each sending ROUNDS clips back to back. Every
 * request must succeed; prints latency percentiles and throughput.
 *
 *   npx tsx test/bench/speech/concurrency.ts [clients=16] [rounds=3]
 */
import fs from 'node:fs';
import { clip } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import { fmt, percentile, postClip } from './common.js';

const clients = Number(process.argv[2] ?? 16);
const rounds = Number(process.argv[3] ?? 3);
const c = clip('librivox-austen-0880.wav');
const wav = fs.readFileSync(c.path);
const app = await startSpeechApp({});
const { key } = await app.issueKey('pro');
await postClip(app.url, key, wav);
const latencies: number[] = [];
const engineMs: number[] = [];
const statuses = new Map<number, number>();
const started = performance.now();
await Promise.all(
  Array.from({ length: clients }, async () => {
    for (let i = 0; i < rounds; i++) {
      const r = await postClip(app.url, key, wav, { response_format: 'json' });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      latencies.push(r.ms);
      if (r.status === 200) engineMs.push(r.engineMs);
    }
  }),
);
const wall = (performance.now() - started) / 1000;
await app.close();
const total = clients * rounds;
const errors = total - (statuses.get(200) ?? 0);
console.log(
  `${clients} clients x ${rounds} requests of ${c.file} (${c.seconds} s), decoder threads: ${app.config.speech.builtin.threads}`,
);
console.log(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}; errors: ${errors}`);
console.log(
  `latency p50 ${fmt(percentile(latencies, 50))} ms, p95 ${fmt(percentile(latencies, 95))} ms, max ${fmt(Math.max(...latencies))} ms`,
);
console.log(
  `decode time per request p50 ${fmt(percentile(engineMs, 50))} ms (RTF ${fmt(percentile(engineMs, 50) / 1000 / c.seconds, 2)})`,
);
console.log(`throughput ${fmt(total / wall, 2)} req/s, ${fmt((total * c.seconds) / wall, 2)} audio s per s`);
process.exit(errors ? 1 : 0);
