/**
 * Memory per decoder: resident set size of a fresh process before and after
 * loading 1, 2 and 4 PocketSphinx decoders (and decoding one clip, which
 * touches the language model). Each measurement runs in its own process.
 *
 *   npx tsx test/bench/speech/memory.ts
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { clip } from '../../speech/helpers.js';
import { fmt, pcmOfWav } from './common.js';

const MB = 1024 * 1024;

if (process.argv[2] === 'child') {
  const threads = Number(process.argv[3]);
  const before = process.memoryUsage().rss;
  const engine = new BuiltinEngine(
    { ...loadConfig({}).speech.builtin, threads },
    createLogger({ level: 'silent' }),
  );
  await engine.ready();
  while (engine.stats().ready < threads) await new Promise((r) => setTimeout(r, 100));
  const pcm = pcmOfWav(clip('librivox-austen-0880.wav').path);
  await Promise.all(
    Array.from({ length: threads }, (_, i) => engine.transcribe({ pcm, workerId: `builtin-${i}` })),
  );
  const after = process.memoryUsage().rss;
  console.log(JSON.stringify({ threads, before, after }));
  await engine.close();
  process.exit(0);
}

const self = fileURLToPath(import.meta.url);
console.log('| decoders | RSS before MB | RSS after MB | added MB | per decoder MB |');
console.log('|---|---|---|---|---|');
for (const threads of [1, 2, 4]) {
  const out = execFileSync(process.execPath, ['--import', 'tsx', self, 'child', String(threads)], {
    encoding: 'utf8',
  });
  const r = JSON.parse(out.trim().split('\n').pop()!) as { before: number; after: number };
  const added = (r.after - r.before) / MB;
  console.log(
    `| ${threads} | ${fmt(r.before / MB)} | ${fmt(r.after / MB)} | ${fmt(added)} | ${fmt(added / threads)} |`,
  );
}
