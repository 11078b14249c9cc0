/**
 * Every clip of test/audio through the running service, per plane
 * (issue 13): WER of the segment endpoint (whole clip), of the realtime tier
 * (real-time pace, 20 ms frames) and of batch (the batch workflow's
 * utterance split, each piece in the clip form as the workflow sends it);
 * for realtime the latency speech_stopped -> completed seen
 * by the client (p50, p90, max) at 1 stream and at N concurrent streams; and
 * the memory of the streaming decoders (RSS growth per decoder).
 *
 *   npx tsx test/bench/speech/planes.ts [--streams=4] [--decoders=8] [--texts]
 *
 * `--capacity`: then the most streams the streaming threads carry: 1, 2, 3,
 * ... concurrent sessions at real-time pace (each streams `--capacity-clips`
 * clips of the rotation) until the p90 of speech_stopped -> completed
 * exceeds 500 ms, an utterance fails or falls back to the clip form. The
 * service runs one streaming thread per core this process may use, so
 *
 *   taskset -c 0 npx tsx test/bench/speech/planes.ts --streams=1 --capacity
 *
 * measures one core (the benchmark's clients share that core; they only send
 * 20 ms frames and read events).
 *
 * `--before`: the 1-stream run also with the earlier first-utterance
 * behaviour (frames wait for the whole 3 s CMN bootstrap), alternating
 * clip by clip with the current one, for a side-by-side comparison.
 */
import fs from 'node:fs';
import os from 'node:os';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { sliceByteRange } from '../../../shared/audio/slicing.js';
import { utterancePieces } from '../../../api/batch/pieces.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import {
  createRealtimeContext,
  connect,
  bearer,
  silence,
  type RealtimeTestContext,
} from '../../realtime/helpers.js';
import { fmt, loadStreamingDecoders, percentile, postClip } from './common.js';

const arg = (name: string, dflt: number) =>
  Number(process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt);
const STREAMS = arg('streams', 4);
const CAPACITY = process.argv.includes('--capacity');
const CAPACITY_MAX = arg('capacity-max', 16);
const CAPACITY_CLIPS = arg('capacity-clips', 3);
const CAPACITY_P90_MS = 500;
const DECODERS = arg('decoders', Math.max(8, STREAMS, CAPACITY ? CAPACITY_MAX : 0));
const CORES = os.availableParallelism();
const clips = loadClips();
const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const STOPPED = 'input_audio_buffer.speech_stopped';
const mb = (b: number) => b / 1024 / 1024;

// ---- segment endpoint, whole clips ----
// Generous decode limits: a busy machine decodes slowly (the endpoint's WER is what counts here).
const app = await startSpeechApp({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const { key: apiKey } = await app.issueKey('pro');
const segmentText: string[] = [];
for (const c of clips) {
  // A busy machine can make the endpoint shed load (503/429): asked again, a few times.
  let r = { status: 0, body: '' };
  for (let attempt = 0; attempt < 5 && r.status !== 200; attempt++)
    r = await postClip(app.url, apiKey, fs.readFileSync(c.path), { response_format: 'json', language: 'en' });
  if (r.status !== 200) throw new Error(`segment endpoint answered ${r.status} for ${c.file}: ${r.body}`);
  segmentText.push((JSON.parse(r.body) as { text: string }).text);
}
await app.close();

// ---- the realtime tier with the built-in engine ----
const config = loadConfig({
  STT_THREADS: '1',
  STT_STREAM_THREADS: String(CORES),
  STT_STREAM_DECODERS: String(DECODERS),
  // Decoders load on demand (about a second each, more on a busy machine): no time limit in the way.
  STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
});
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const rssBefore = process.memoryUsage().rss;
// Load every streaming decoder (one stream each, one utterance of silence) to measure their memory.
await loadStreamingDecoders(engine, DECODERS);
const rssDecoders = process.memoryUsage().rss;
const perDecoderMb = mb(rssDecoders - rssBefore) / DECODERS;

const ctx: RealtimeTestContext = await createRealtimeContext({ engine });
const BEFORE = process.argv.includes('--before');
/** The earlier behaviour: a session's frames wait for the whole bootstrap (lookahead = bootstrap). */
const waiting = BEFORE
  ? await (async () => {
      const b = config.speech.builtin;
      const e = new BuiltinEngine(
        {
          ...b,
          streamDecoders: 2,
          streamCmn: { ...b.streamCmn, lookaheadFrames: b.streamCmn.bootstrapFrames },
        },
        createLogger({ level: 'warn' }),
      );
      await e.ready();
      return { engine: e, ctx: await createRealtimeContext({ engine: e, testDb: ctx.testDb }) };
    })()
  : undefined;

interface Run {
  texts: string[];
  latencies: number[];
  fallbacks: number;
  /** Utterances whose final carried an error or never came. */
  failed: number;
}

/** Sessions streaming `count` clips each in turn at real-time pace (20 ms frames); `offset` rotates the order. */
async function session(
  offset: number,
  count = clips.length,
  alternate?: RealtimeTestContext,
): Promise<{
  texts: string[];
  latencies: number[];
  failed: number;
  other?: { texts: string[]; latencies: number[] };
}> {
  const texts = new Array<string>(clips.length).fill('');
  const latencies: number[] = [];
  let failed = 0;
  const other = alternate && { texts: new Array<string>(clips.length).fill(''), latencies: [] as number[] };
  const one = async (c: RealtimeTestContext, i: number, out: { texts: string[]; latencies: number[] }) => {
    const { key } = await c.issueKey('pro');
    const cl = await connect(c.url, bearer(key));
    await cl.next('session.created');
    const stoppedAt = new Map<number, number>();
    cl.ws.on('message', (data) => {
      const ev = JSON.parse(String(data)) as { type: string; utterance_index: number };
      if (ev.type === STOPPED) stoppedAt.set(ev.utterance_index, performance.now());
      if (ev.type === COMPLETED) out.latencies.push(performance.now() - stoppedAt.get(ev.utterance_index)!);
    });
    await cl.stream(Buffer.concat([silence(300), pcmOf(clips[i].path), silence(900)]), {
      pace: 1,
      frameBytes: 640,
    });
    const complete = (evs: Record<string, unknown>[]) => {
      const stopped = evs.filter((e) => e.type === STOPPED).length;
      return stopped > 0 && evs.filter((e) => e.type === COMPLETED).length === stopped;
    };
    await cl.waitFor(complete, 120_000).catch(() => undefined);
    failed +=
      cl.of(STOPPED).length - cl.of(COMPLETED).length + cl.of(COMPLETED).filter((e) => e.error).length;
    cl.ws.close(1000);
    await cl.closed;
    out.texts[i] = cl
      .of(COMPLETED)
      .sort((a, b) => a.utterance_index - b.utterance_index)
      .map((e) => e.text)
      .join(' ');
  };
  for (let k = 0; k < count; k++) {
    const i = (k + offset) % clips.length;
    await one(ctx, i, { texts, latencies });
    if (alternate) await one(alternate, i, other!);
  }
  return { texts, latencies, failed, other };
}

async function realtime(
  streams: number,
  clipsEach = clips.length,
  alternate?: RealtimeTestContext,
): Promise<Run & { other?: { texts: string[]; latencies: number[] } }> {
  const before = engine.streamingStats()!.fallbacks;
  const runs = await Promise.all(
    Array.from({ length: streams }, (_, s) => session(s, clipsEach, s === 0 ? alternate : undefined)),
  );
  return {
    other: runs[0].other,
    texts: runs[0].texts,
    latencies: runs.flatMap((r) => r.latencies),
    fallbacks: engine.streamingStats()!.fallbacks - before,
    failed: runs.reduce((n, r) => n + r.failed, 0),
  };
}

const one = await realtime(1, clips.length, waiting?.ctx);
const many = await realtime(STREAMS);
let rssPeak = process.memoryUsage().rss;

// ---- the most streams the streaming threads carry ----
const ramp: [number, Run][] = [];
let carried = 0;
if (CAPACITY)
  for (let n = 1; n <= CAPACITY_MAX; n++) {
    const r = await realtime(n, CAPACITY_CLIPS);
    ramp.push([n, r]);
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    if (r.failed > 0 || r.fallbacks > 0 || percentile(r.latencies, 90) > CAPACITY_P90_MS) break;
    carried = n;
  }

// ---- batch: the workflow's utterance split, each piece in the clip form (as api/batch/steps/transcribe.ts does) ----
const batchText: string[] = [];
for (const c of clips) {
  const pcm = pcmOf(c.path);
  const pieces = await utterancePieces(pcm, config.batch);
  const results = await Promise.all(
    pieces.map((p) => {
      const r = sliceByteRange(p);
      return engine.transcribe({ pcm: pcm.subarray(r.start, r.end), language: 'en' });
    }),
  );
  batchText.push(results.map((r) => r.text).join(' '));
}
// The earlier behaviour's context shares the database the first one drops.
if (waiting) {
  await waiting.ctx.close();
  await waiting.engine.close();
}
await ctx.close();
await engine.close();

// ---- report ----
const nWords = clips.map((c) => c.reference.split(/\s+/).length);
const total = nWords.reduce((a, x) => a + x, 0);
const planes: [string, string[]][] = [
  ['segment (whole clip)', segmentText],
  ['realtime, 1 stream', one.texts],
  ...(one.other
    ? [['realtime, 1 stream, before (frames wait for the bootstrap)', one.other.texts] as [string, string[]]]
    : []),
  ['batch', batchText],
];
console.log(
  `| plane | WER (word-weighted) | worst clip vs segment | ${clips.map((c) => c.file.replace('.wav', '')).join(' | ')} |`,
);
console.log(`|---|---|---|${clips.map(() => '---').join('|')}|`);
const seg = segmentText.map((t, i) => wer(clips[i].reference, t));
for (const [name, texts] of planes) {
  const w = texts.map((t, i) => wer(clips[i].reference, t));
  const weighted = w.reduce((a, x, i) => a + x * nWords[i], 0) / total;
  const worst = Math.max(...w.map((x, i) => x - seg[i]));
  console.log(
    `| ${name} | ${fmt(weighted * 100)}% | ${worst >= 0 ? '+' : ''}${fmt(worst * 100)} | ${w.map((x) => fmt(x * 100)).join(' | ')} |`,
  );
}
console.log(
  '\n| realtime (real-time pace, 20 ms frames) | utterances | stopped→completed p50 | p90 | max | clip-form fallbacks |',
);
console.log('|---|---|---|---|---|---|');
const row = (name: string, r: Run) =>
  console.log(
    `| ${name} | ${r.latencies.length} | ${fmt(percentile(r.latencies, 50), 0)} ms | ${fmt(percentile(r.latencies, 90), 0)} ms | ${fmt(Math.max(...r.latencies), 0)} ms | ${r.fallbacks}${r.failed ? `, ${r.failed} failed` : ''} |`,
  );
row('1 stream', one);
if (one.other)
  row('1 stream, before (frames wait for the bootstrap), alternating with the row above', {
    ...one.other,
    fallbacks: 0,
    failed: 0,
  });
row(`${STREAMS} streams`, many);
for (const [n, r] of ramp)
  row(`capacity ramp: ${n} stream${n > 1 ? 's' : ''}, ${CAPACITY_CLIPS} clips each`, r);
if (CAPACITY)
  console.log(
    `\nmost streams carried on ${CORES} core${CORES > 1 ? 's' : ''} (${CORES} streaming thread${CORES > 1 ? 's' : ''}; p90 ≤ ${CAPACITY_P90_MS} ms, no failure, no fallback): ` +
      `${carried}${carried === CAPACITY_MAX ? ` (the ramp stopped at --capacity-max=${CAPACITY_MAX})` : ''}`,
  );
console.log(
  `\nmemory: ${DECODERS} streaming decoders add ${fmt(mb(rssDecoders - rssBefore), 0)} MiB RSS (${fmt(perDecoderMb, 1)} MiB each); ` +
    `RSS of this process (segment app closed, realtime tier + engine + ${STREAMS} sessions): ${fmt(mb(rssPeak), 0)} MiB`,
);
if (process.argv.includes('--texts'))
  for (const [name, texts] of planes)
    console.log(`\n${name}\n${texts.map((t, i) => `  ${clips[i].file}: ${t}`).join('\n')}`);
process.exit(0);
