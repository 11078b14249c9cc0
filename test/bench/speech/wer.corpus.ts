/**
 * The generated evaluation corpus (test/audio/corpus) through every plane
 * (issue 21): word-weighted WER per plane, per condition (voice, lead-in,
 * noise, tempo) and per clip; the timing error of reported word starts
 * (sentence starts against the generator's speech intervals); end of speech
 * to final for realtime, measured the way the field measures it (from the
 * last speech sample sent at real-time pace to the `completed` event,
 * silence detection included); and batch on the long-form files against the
 * same audio decoded in the largest pieces.
 *
 *   npm run bench:wer                     # every short clip; realtime fast, latency on --latency clips
 *   npm run bench:wer -- --latency=8 --streams=4 --silence=0,500 --long   # 0: the default turn end
 *   npm run bench:wer -- --latency=8 --silence=0,500 --latency-only     # only end of speech to final
 *   --floor=3: the segment endpoint again with 300 ms of -70 dBFS noise before each clip, per seed
 *   (the whole-clip decode against itself: the engine's own per-clip floor; 0 skips it)
 *   --turns: each turn end's figures per clip (stderr)
 *   --corpus=DIR: clips no setting was tuned on (test/audio/corpus/generate.ts --held-out=DIR)
 *
 * Planes: segment = the segment endpoint (whole clip, FLAC upload);
 * realtime = a realtime server with the built-in engine's streaming form
 * (the clip after its own lead-in, plus 700 ms more, 100 ms frames, as fast
 * as it takes them); batch = the batch workflow's utterance split, each
 * piece in the clip form as api/batch/steps/transcribe.ts sends it.
 */
import fs from 'node:fs';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { sliceByteRange } from '../../../shared/audio/slicing.js';
import { pcmToWav } from '../../../shared/audio/index.js';
import { utterancePieces } from '../../../api/batch/pieces.js';
import { wer } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import {
  corpusPcm,
  loadCorpus,
  percentile,
  timing,
  type CorpusClip,
  type TimedWord,
} from '../../speech/corpus.js';
import { createRealtimeContext, connect, bearer, silence } from '../../realtime/helpers.js';
import { fmt, postClip } from './common.js';

const arg = (name: string, dflt: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt;
const LATENCY_CLIPS = Number(arg('latency', '12'));
const STREAMS = Number(arg('streams', '4'));
const SILENCES = arg('silence', '500,300').split(',').map(Number);
const LONG = process.argv.includes('--long');
/** Only the end-of-speech-to-final measurement (no planes, no report tables). */
const LATENCY_ONLY = process.argv.includes('--latency-only');
const TURNS = process.argv.includes('--turns');
const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const STOPPED = 'input_audio_buffer.speech_stopped';
/** How many noise seeds measure the engine's own floor (0: none). */
const FLOOR_SEEDS = Number(arg('floor', '3'));
const FLOOR_LEAD_S = 0.3;
/** `--corpus=DIR`: a held-out corpus (test/audio/corpus/generate.ts --held-out=DIR) in place of the committed one. */
const CORPUS = arg('corpus', '') || undefined;
const clips = loadCorpus('short', CORPUS);

/** White noise at about -70 dBFS (RMS 10 of 32768), reproducible per seed. */
function inaudibleNoise(seconds: number, seed: number): Buffer {
  let x = seed;
  const out = Buffer.alloc(Math.round(seconds * 16000) * 2);
  for (let i = 0; i < out.length / 2; i++) {
    x = (Math.imul(x, 1103515245) + 12345) & 0x7fffffff;
    out.writeInt16LE(Math.round((x / 0x7fffffff - 0.5) * 34.6), i * 2);
  }
  return out;
}
const nWords = (c: CorpusClip) => c.reference.split(' ').length;

interface PlaneResult {
  texts: string[];
  words: TimedWord[][];
}

// ---- segment endpoint ----
const app = await startSpeechApp({ STT_THREADS: '2', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const { key: apiKey } = await app.issueKey('pro');
const segment: PlaneResult = { texts: [], words: [] };
for (const c of LATENCY_ONLY ? [] : clips) {
  const r = await postClip(app.url, apiKey, fs.readFileSync(c.path), { response_format: 'verbose_json' });
  if (r.status !== 200) throw new Error(`segment endpoint answered ${r.status} for ${c.file}: ${r.body}`);
  const body = JSON.parse(r.body) as { text: string; words: TimedWord[] };
  segment.texts.push(body.text);
  segment.words.push(body.words);
}
// ---- the engine's own floor: the same endpoint, the clip after 300 ms of inaudible noise ----
// No plane can be held to a closer per-clip bound than the whole-clip decode holds against itself
// when the audio changes by nothing a listener could hear (decisions/speech.md).
const floors: [string, PlaneResult][] = [];
for (let seed = 1; seed <= (LATENCY_ONLY ? 0 : FLOOR_SEEDS); seed++) {
  const floor: PlaneResult = { texts: [], words: [] };
  for (const c of clips) {
    const lead = inaudibleNoise(FLOOR_LEAD_S, seed);
    const r = await postClip(app.url, apiKey, pcmToWav(Buffer.concat([lead, corpusPcm(c)])), {
      response_format: 'verbose_json',
    });
    if (r.status !== 200) throw new Error(`segment endpoint answered ${r.status} for ${c.file}: ${r.body}`);
    const body = JSON.parse(r.body) as { text: string; words: TimedWord[] };
    floor.texts.push(body.text);
    floor.words.push(
      body.words.map((w) => ({ ...w, start: w.start - FLOOR_LEAD_S, end: w.end - FLOOR_LEAD_S })),
    );
  }
  floors.push([`segment after ${FLOOR_LEAD_S * 1000} ms of -70 dBFS noise (seed ${seed})`, floor]);
}
await app.close();

// ---- realtime ----
const config = loadConfig({ STT_THREADS: '2', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();

async function stream(
  ctx: Awaited<ReturnType<typeof createRealtimeContext>>,
  c: CorpusClip,
  o: { leadMs: number; pace: number; frameMs: number; silenceMs?: number },
): Promise<{ text: string; words: TimedWord[]; endToFinal: number[]; endToStopped: number[] }> {
  const { key } = await ctx.issueKey('pro');
  const cl = await connect(ctx.url, bearer(key));
  await cl.next('session.created');
  if (o.silenceMs) cl.send({ type: 'session.update', vad_silence_ms: o.silenceMs });
  const pcm = Buffer.concat([silence(o.leadMs), corpusPcm(c), silence(1500)]);
  // When each sentence's last speech sample went out (real-time pace only).
  const ends = c.speech.map(([, e]) => (o.leadMs / 1000 + e) * 32000);
  const sentAt: number[] = [];
  const finals: number[] = [];
  const stops: number[] = [];
  cl.ws.on('message', (data) => {
    const ev = JSON.parse(String(data)) as { type: string };
    if (ev.type === COMPLETED) finals.push(performance.now());
    if (ev.type === STOPPED) stops.push(performance.now());
  });
  const t0 = performance.now();
  await cl.stream(pcm, { pace: o.pace, frameBytes: o.frameMs * 32 });
  if (o.pace > 0) for (const e of ends) sentAt.push(t0 + e / 32 / o.pace);

  await cl.finals(120_000).catch((err) => {
    console.error(`${c.file}: ${err}\n${ctx.logs.lines.slice(-20).join('\n')}`);
    throw err;
  });
  cl.ws.close(1000);
  await cl.closed;
  const done = cl.of(COMPLETED).sort((a, b) => a.utterance_index - b.utterance_index);
  const words = done
    .flatMap((e) => (e.words as TimedWord[]) ?? [])
    .map((w) => ({
      ...w,
      start: w.start - o.leadMs / 1000,
      end: w.end - o.leadMs / 1000,
    }));
  // End of speech -> final: each sentence's end to the first final after it (sentences merged into one
  // utterance count once, at the last).
  const endToFinal: number[] = [];
  /** The same turns' end to their `speech_stopped` (silence detection alone). */
  const endToStopped: number[] = [];
  for (const [i, s] of sentAt.entries()) {
    const next = sentAt[i + 1];
    const f = finals.find((t) => t > s);
    if (f !== undefined && (next === undefined || f < next)) {
      endToFinal.push(f - s);
      const st = stops.find((t) => t > s);
      if (st !== undefined && st <= f) endToStopped.push(st - s);
    }
  }
  return {
    text: done
      .map((e) => e.text)
      .join(' ')
      .trim(),
    words,
    endToFinal,
    endToStopped,
  };
}

const ctx = await createRealtimeContext({ engine });
const realtime: PlaneResult = { texts: [], words: [] };
const realtimeLead: PlaneResult = { texts: [], words: [] };
for (const c of LATENCY_ONLY ? [] : clips) {
  const r = await stream(ctx, c, { leadMs: 0, pace: 0, frameMs: 100 });
  realtime.texts.push(r.text);
  realtime.words.push(r.words);
  const l = await stream(ctx, c, { leadMs: 700, pace: 0, frameMs: 100 });
  realtimeLead.texts.push(l.text);
  realtimeLead.words.push(l.words);
}

// End of speech -> final at real-time pace: one stream, then STREAMS at once; per VAD silence window.
const latencyRows: string[] = [];
const latencyClips = clips.filter((c) => c.voice.startsWith('flite')).slice(0, LATENCY_CLIPS);
for (const silenceMs of latencyClips.length > 0 ? SILENCES : []) {
  const one: number[] = [];
  const oneStopped: number[] = [];
  const texts: string[] = [];
  for (const c of latencyClips) {
    const r = await stream(ctx, c, { leadMs: 0, pace: 1, frameMs: 20, silenceMs });
    one.push(...r.endToFinal);
    oneStopped.push(...r.endToStopped);
    if (TURNS)
      console.error(
        `${c.file} silence ${silenceMs || 'default'}: end -> speech_stopped ${r.endToStopped.map(Math.round).join(', ')} ms; end -> final ${r.endToFinal.map(Math.round).join(', ')} ms`,
      );
    texts.push(r.text);
  }
  const many: number[] = [];
  for (let k = 0; k < latencyClips.length; k += STREAMS) {
    const batch = latencyClips.slice(k, k + STREAMS);
    const rs = await Promise.all(
      batch.map((c) => stream(ctx, c, { leadMs: 0, pace: 1, frameMs: 20, silenceMs })),
    );
    for (const r of rs) many.push(...r.endToFinal);
  }
  const words = latencyClips.reduce((n, c) => n + nWords(c), 0);
  const err = latencyClips.reduce((e, c, i) => e + wer(c.reference, texts[i]) * nWords(c), 0);
  latencyRows.push(
    `| ${silenceMs ? `${silenceMs} ms` : 'default (sentence end)'} | ${fmt(percentile(one, 50), 0)} ms | ${fmt(percentile(one, 95), 0)} ms | ${STREAMS}: ${fmt(percentile(many, 50), 0)} ms | ${fmt(percentile(many, 95), 0)} ms | ${fmt((100 * err) / words)}% | ${fmt(percentile(oneStopped, 50), 0)} / ${fmt(percentile(oneStopped, 95), 0)} ms |`,
  );
}
await ctx.close();

// ---- batch ----
async function batchText(pcm: Buffer): Promise<{ text: string; words: TimedWord[] }> {
  const pieces = await utterancePieces(pcm, config.batch);
  const results = await Promise.all(
    pieces.map(async (p) => {
      const r = sliceByteRange(p);
      const out = await engine.transcribe({ pcm: pcm.subarray(r.start, r.end), language: 'en' });
      return out.words.map((w) => ({ ...w, start: w.start + r.start / 32000, end: w.end + r.start / 32000 }));
    }),
  );
  const words = results.flat();
  return { text: words.map((w) => w.word).join(' '), words };
}
const batch: PlaneResult = { texts: [], words: [] };
for (const c of LATENCY_ONLY ? [] : clips) {
  const r = await batchText(corpusPcm(c));
  batch.texts.push(r.text);
  batch.words.push(r.words);
}

// ---- long form: batch against the largest pieces ----
const longRows: string[] = [];
/** Batch word-start errors on the long-form files (pooled with the short clips' in the report). */
const longStarts: number[] = [];
if (LONG)
  for (const c of loadCorpus('long', CORPUS)) {
    const pcm = corpusPcm(c);
    const b = await batchText(pcm);
    // The largest pieces: the engine's time limit allows any length; 60 s pieces cut at the quietest
    // 10 ms near each boundary keep the decoder's memory bounded.
    const big: string[] = [];
    for (let at = 0; at < pcm.length;) {
      let end = Math.min(pcm.length, at + 60 * 32000);
      if (end < pcm.length) {
        let best = end;
        let bestE = Infinity;
        for (let x = end - 32000; x < end; x += 320) {
          let e = 0;
          for (let k = x; k < x + 320; k += 2) e += Math.abs(pcm.readInt16LE(k));
          if (e < bestE) [best, bestE] = [x, e];
        }
        end = best;
      }
      big.push((await engine.transcribe({ pcm: pcm.subarray(at, end), language: 'en' })).text);
      at = end;
    }
    const t = timing(c, b.words);
    longStarts.push(...t.startErrors);
    longRows.push(
      `| ${c.file} | ${fmt(pcm.length / 32000 / 60)} min | ${fmt(100 * wer(c.reference, b.text))}% | ${fmt(100 * wer(c.reference, big.join(' ')))}% | ${fmt(percentile(t.startErrors, 95), 3)} s | ${t.outside.length} |`,
    );
  }
await engine.close();

// ---- report ----
const mainPlanes: [string, PlaneResult][] = [
  ['segment', segment],
  ['realtime', realtime],
  ['realtime +700 ms lead-in', realtimeLead],
  ['batch', batch],
];
const planes = [...mainPlanes, ...floors];
const rate = (p: PlaneResult, pick: (c: CorpusClip) => boolean) => {
  let e = 0;
  let n = 0;
  clips.forEach((c, i) => {
    if (!pick(c)) return;
    e += wer(c.reference, p.texts[i]) * nWords(c);
    n += nWords(c);
  });
  return n ? (100 * e) / n : NaN;
};
const conditions: [string, (c: CorpusClip) => boolean][] = [
  ['all', () => true],
  ...[...new Set(clips.map((c) => c.voice))].map((v): [string, (c: CorpusClip) => boolean] => [
    v,
    (c) => c.voice === v,
  ]),
  ['lead-in 0-0.5 s', (c) => c.leadIn <= 0.5],
  ['lead-in 1-2 s', (c) => c.leadIn >= 1],
  ['no noise', (c) => c.noiseDb === null],
  ['noise', (c) => c.noiseDb !== null],
  ['tempo 0.9', (c) => c.tempo === 0.9],
  ['tempo 1.0', (c) => c.tempo === 1],
  ['tempo 1.1', (c) => c.tempo === 1.1],
];
if (!LATENCY_ONLY) {
  console.log(`corpus: ${clips.length} clips, ${clips.reduce((n, c) => n + nWords(c), 0)} words\n`);
  console.log(`| condition | ${mainPlanes.map(([n]) => n).join(' | ')} |`);
  console.log(`|---|${mainPlanes.map(() => '---').join('|')}|`);
  for (const [name, pick] of conditions)
    console.log(`| ${name} | ${mainPlanes.map(([, p]) => `${fmt(rate(p, pick))}%`).join(' | ')} |`);

  console.log(
    `\n| plane | WER | worst clip vs segment | clips > +5 / < -5 points | word starts: p50 | p95 | words outside speech (> 0.15 s) |`,
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const [name, p] of planes) {
    const excess = clips.map((c, i) => wer(c.reference, p.texts[i]) - wer(c.reference, segment.texts[i]));
    const starts: number[] = [];
    let outside = 0;
    clips.forEach((c, i) => {
      const t = timing(c, p.words[i]);
      starts.push(...t.startErrors);
      outside += t.outside.length;
    });
    console.log(
      `| ${name} | ${fmt(rate(p, () => true))}% | +${fmt(100 * Math.max(...excess))} | ${excess.filter((x) => x > 0.05).length} / ${excess.filter((x) => x < -0.05).length} | ${fmt(percentile(starts, 50), 3)} s | ${fmt(percentile(starts, 95), 3)} s | ${outside} |`,
    );
  }
}
if (latencyRows.length) {
  console.log(
    `\nEnd of speech -> final (realtime, real-time pace, 20 ms frames, ${latencyClips.length} clips; silence window = VAD silence_ms)`,
  );
  console.log(
    '| silence window | 1 stream p50 | p95 | streams: p50 | p95 | WER (1 stream) | end -> speech_stopped p50 / p95 (1 stream) |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const r of latencyRows) console.log(r);
}
if (longRows.length) {
  console.log(
    '\n| long-form file | length | batch WER | 60 s pieces WER | batch word starts p95 | batch words outside speech |',
  );
  console.log('|---|---|---|---|---|---|');
  for (const r of longRows) console.log(r);
  const starts = clips
    .flatMap((c, i) => (batch.words[i] ? timing(c, batch.words[i]).startErrors : []))
    .concat(longStarts);
  console.log(
    `\nBatch word starts over the whole generated corpus (short clips and long-form files, ${starts.length} sentence starts): p50 ${fmt(percentile(starts, 50), 3)} s, p95 ${fmt(percentile(starts, 95), 3)} s`,
  );
}
if (process.argv.includes('--clips')) {
  console.log(`\n| clip | ${planes.map(([n]) => n).join(' | ')} |`);
  console.log(`|---|${planes.map(() => '---').join('|')}|`);
  clips.forEach((c, i) =>
    console.log(
      `| ${c.file} | ${planes.map(([, p]) => fmt(100 * wer(c.reference, p.texts[i]))).join(' | ')} |`,
    ),
  );
}
process.exit(0);
