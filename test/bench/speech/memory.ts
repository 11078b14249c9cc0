/**
 * Memory per decoder: resident set size of a fresh process before and after
 * loading 1, 2 and 4 PocketSphinx clip decoders (one per thread, and decoding
 * one clip, which touches the language model); then 1, 2, 4 and 8 streaming
 * decoders on one streaming thread (one utterance each), which share the
 * thread's language models (shared/stt/pocketsphinx/models.ts): what the
 * thread costs and what each decoder past the first adds. Each measurement
 * runs in its own process.
 *
 *   npx tsx test/bench/speech/memory.ts [--streaming]   (--streaming: the second table only)
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { clip } from '../../speech/helpers.js';
import { fmt, loadStreamingDecoders, pcmOfWav } from './common.js';

const MB = 1024 * 1024;

/**
 * Proportional set size: RSS counts a page once per mapping, and each decoder maps the acoustic
 * model's `mdef` file itself (PocketSphinx reads it with mmap), so RSS counts those shared pages once
 * per decoder; PSS counts them once.
 */
function pss(): number {
  const m = /^Pss:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/self/smaps_rollup', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

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

if (process.argv[2] === 'streaming-child') {
  const decoders = Number(process.argv[3]);
  const engine = new BuiltinEngine(
    {
      ...loadConfig({}).speech.builtin,
      threads: 1,
      streamThreads: 1,
      streamDecoders: decoders,
      timeoutBaseMs: 120_000,
    },
    createLogger({ level: 'silent' }),
  );
  await engine.ready();
  const before = process.memoryUsage().rss;
  const pssBefore = pss();
  await loadStreamingDecoders(engine, decoders);
  const after = process.memoryUsage().rss;
  console.log(JSON.stringify({ decoders, before, after, pssBefore, pssAfter: pss() }));
  await engine.close();
  process.exit(0);
}

const self = fileURLToPath(import.meta.url);
const run = (...args: string[]) => {
  const out = execFileSync(process.execPath, ['--import', 'tsx', self, ...args], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').pop()!) as {
    before: number;
    after: number;
    pssBefore?: number;
    pssAfter?: number;
  };
};
if (!process.argv.includes('--streaming')) {
  console.log('| clip decoders (threads) | RSS before MB | RSS after MB | added MB | per decoder MB |');
  console.log('|---|---|---|---|---|');
  for (const threads of [1, 2, 4]) {
    const r = run('child', String(threads));
    const added = (r.after - r.before) / MB;
    console.log(
      `| ${threads} | ${fmt(r.before / MB)} | ${fmt(r.after / MB)} | ${fmt(added)} | ${fmt(added / threads)} |`,
    );
  }
  console.log('');
}
console.log(
  '| streaming decoders on one thread | RSS added MiB | per decoder MiB | past the first, each MiB | PSS added MiB | PSS past the first, each MiB |',
);
console.log('|---|---|---|---|---|---|');
let first = 0;
let firstPss = 0;
for (const decoders of [1, 2, 4, 8]) {
  const r = run('streaming-child', String(decoders));
  const added = (r.after - r.before) / MB;
  const addedPss = (r.pssAfter! - r.pssBefore!) / MB;
  if (decoders === 1) [first, firstPss] = [added, addedPss];
  const past = decoders > 1 ? fmt((added - first) / (decoders - 1)) : '–';
  const pastPss = decoders > 1 ? fmt((addedPss - firstPss) / (decoders - 1)) : '–';
  console.log(
    `| ${decoders} | ${fmt(added)} | ${fmt(added / decoders)} | ${past} | ${fmt(addedPss)} | ${pastPss} |`,
  );
}
