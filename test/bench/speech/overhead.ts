/**
 * Endpoint overhead: client-observed latency of POST /v1/audio/transcriptions
 * minus the engine's own decode time (X-Engine-Ms), for a 5.3 s clip, over
 * N sequential requests. Covers auth, rate limit, multipart parsing, audio
 * handling, quota query, usage insert and formatting.
 *
 *   npx tsx test/bench/speech/overhead.ts [n=30]
 */
import fs from 'node:fs';
import { clip } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import { fmt, percentile, postClip } from './common.js';

const n = Number(process.argv[2] ?? 30);
const c = clip('librivox-austen-0890.wav');
const wav = fs.readFileSync(c.path);
const app = await startSpeechApp({ STT_THREADS: '1' });
const { key } = await app.issueKey('pro');
for (let i = 0; i < 3; i++) await postClip(app.url, key, wav); // warm-up (key cache, JIT)
const overhead: number[] = [];
const total: number[] = [];
for (let i = 0; i < n; i++) {
  const r = await postClip(app.url, key, wav);
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.body}`);
  total.push(r.ms);
  overhead.push(r.ms - r.engineMs);
}
await app.close();
console.log(`clip ${c.file} (${c.seconds} s), ${n} sequential requests`);
console.log('| | p50 ms | p95 ms |');
console.log('|---|---|---|');
console.log(`| total latency | ${fmt(percentile(total, 50))} | ${fmt(percentile(total, 95))} |`);
console.log(
  `| endpoint overhead (total - engine) | ${fmt(percentile(overhead, 50))} | ${fmt(percentile(overhead, 95))} |`,
);
process.exit(0);
