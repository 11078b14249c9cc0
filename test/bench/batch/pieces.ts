/**
 * How batch cuts a chunk into engine calls, and what it costs in words and
 * time (issue 13): the built-in engine's clip form on
 *
 * 1. every clip of test/audio (one chunk each, as a batch job of a
 *    short file is): whole clip vs the workflow's utterance split
 *    (`splitUtterances`) with each minimum piece length given;
 * 2. a long recording (the clips repeated with 0.7 s pauses, one chunk of
 *    `segment_seconds`): WER, pieces, engine time (sum of decodes), wall time
 *    with 2 decoder threads and the RSS growth of the process.
 *
 *   npx tsx test/bench/batch/pieces.ts [chunk_seconds=300] [min_seconds=0,10,20,30] [--whole]
 *
 * (each list of minimums is followed by the workflow's own cut, `shipped`: api/batch/pieces.ts)
 *
 * (`--whole` also decodes the long chunk whole: one call, a few minutes.)
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { energyEnvelope, sliceByteRange, splitUtterances } from '../../../shared/audio/slicing.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { buildRecording, tmpDir } from '../../batch/helpers.js';
import { utterancePieces } from '../../../api/batch/pieces.js';
import { fmt } from '../speech/common.js';

const chunkSeconds = Number(process.argv[2] ?? 300);
const mins = (process.argv[3]?.startsWith('--') ? '0,10,20,30' : (process.argv[3] ?? '0,10,20,30'))
  .split(',')
  .map(Number);
const config = loadConfig(
  { STT_THREADS: '2', STT_BUILTIN_TIMEOUT_BASE_MS: '900000' },
  // All pieces are queued at once (the workflow holds them in its own slots instead).
  { speech: { builtin: { queueTimeoutMs: 900_000 } } },
);
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const clips = loadClips();

type How = number | 'whole' | 'shipped';

/** Decodes `pcm` cut as `how` says (a minimum piece length, 'whole', or the workflow's own cut), pieces in parallel. */
async function decode(pcm: Buffer, how: How) {
  const seconds = pcm.length / 32000;
  const pieces =
    how === 'whole'
      ? [{ index: 0, start: 0, end: seconds }]
      : how === 'shipped'
        ? await utterancePieces(pcm, config.batch)
        : splitUtterances(energyEnvelope(pcm), seconds, {
            minPauseSeconds: config.batch.utteranceMinPauseSeconds,
            maxUtteranceSeconds: config.batch.utteranceMaxSeconds,
            minUtteranceSeconds: how,
          });
  const t0 = Date.now();
  const rss0 = process.memoryUsage().rss;
  let rssPeak = rss0;
  const timer = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 100);
  const results = await Promise.all(
    pieces.map((p) => {
      const r = sliceByteRange(p);
      return engine.transcribe({ pcm: pcm.subarray(r.start, r.end), language: 'en' });
    }),
  );
  clearInterval(timer);
  return {
    text: results.map((r) => r.text).join(' '),
    pieces: pieces.length,
    engineMs: results.reduce((a, r) => a + r.engineMs, 0),
    wallMs: Date.now() - t0,
    rssGrowthMb: (rssPeak - rss0) / 1024 / 1024,
  };
}

const hows: How[] = ['whole', ...mins, 'shipped'];
const label = (h: How) =>
  h === 'whole'
    ? 'whole chunk'
    : h === 'shipped'
      ? `shipped: >= ${config.batch.utteranceMinSeconds} s, joined to ${config.batch.utteranceJoinSeconds} s within a channel`
      : `split, pieces >= ${h} s`;

// ---- 1. the clips, each one chunk ----
const nWords = clips.map((c) => c.reference.split(/\s+/).length);
const total = nWords.reduce((a, x) => a + x, 0);
console.log(
  `| cut (per clip) | WER (word-weighted) | worst clip vs whole | ${clips.map((c) => c.file.replace('.wav', '')).join(' | ')} |`,
);
console.log(`|---|---|---|${clips.map(() => '---').join('|')}|`);
let whole: number[] = [];
for (const how of hows) {
  const w: number[] = [];
  for (const c of clips) w.push(wer(c.reference, (await decode(pcmOf(c.path), how)).text));
  if (how === 'whole') whole = w;
  const weighted = w.reduce((a, x, i) => a + x * nWords[i], 0) / total;
  const worst = Math.max(...w.map((x, i) => x - whole[i]));
  console.log(
    `| ${label(how)} | ${fmt(weighted * 100)}% | ${worst >= 0 ? '+' : ''}${fmt(worst * 100)} | ${w.map((x) => fmt(x * 100)).join(' | ')} |`,
  );
}

// ---- 2. one long chunk ----
const dir = tmpDir('batch-pieces-');
const order: string[] = [];
let seconds = 0;
while (seconds < chunkSeconds) {
  const c = clips[order.length % clips.length];
  order.push(c.file);
  seconds += c.seconds + 0.7;
}
const recording = buildRecording(path.join(dir, 'long.wav'), order, 0.7);
const pcm = pcmOf(recording);
const reference = order.map((f) => clips.find((c) => c.file === f)!.reference).join(' ');
console.log(
  `\n| cut (${fmt(pcm.length / 32000, 0)} s chunk, 2 decoder threads) | WER | pieces | engine time | RTF | wall | RSS growth |`,
);
console.log('|---|---|---|---|---|---|---|');
for (const how of process.argv.includes('--whole') ? hows : [...mins, 'shipped' as const]) {
  const r = await decode(pcm, how);
  console.log(
    `| ${label(how)} | ${fmt(wer(reference, r.text) * 100)}% | ${r.pieces} | ${fmt(r.engineMs / 1000)} s | ${fmt(r.engineMs / 1000 / (pcm.length / 32000), 3)} | ${fmt(r.wallMs / 1000)} s | ${fmt(r.rssGrowthMb, 0)} MiB |`,
  );
}
fs.rmSync(dir, { recursive: true, force: true });
await engine.close();
process.exit(0);
