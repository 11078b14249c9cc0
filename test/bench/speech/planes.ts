/**
 * Every clip of ../shared/test-audio through the running service, per plane
 * (issue 13): WER of the segment endpoint (whole clip), of the realtime tier
 * (real-time pace, 20 ms frames) and of batch (the batch workflow's
 * utterance split, each piece in the clip form as the workflow sends it);
 * for realtime the latency speech_stopped -> completed seen
 * by the client (p50, p90, max) at 1 stream and at N concurrent streams; and
 * the memory of the streaming decoders (RSS growth per decoder).
 *
 *   npx tsx test/bench/speech/planes.ts [--streams=4] [--decoders=8]
 */
import fs from 'node:fs';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { energyEnvelope, sliceByteRange, splitUtterances } from '../../../api/batch/slicing.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import {
  createRealtimeContext,
  connect,
  bearer,
  silence,
  type RealtimeTestContext,
} from '../../realtime/helpers.js';
import { fmt, percentile, postClip } from './common.js';

const arg = (name: string, dflt: number) =>
  Number(process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt);
const STREAMS = arg('streams', 4);
const DECODERS = arg('decoders', Math.max(8, STREAMS));
const clips = loadClips();
const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const STOPPED = 'input_audio_buffer.speech_stopped';
const mb = (b: number) => b / 1024 / 1024;

// ---- segment endpoint, whole clips ----
const app = await startSpeechApp({ STT_THREADS: '1' });
const { key: apiKey } = await app.issueKey('pro');
const segmentText: string[] = [];
for (const c of clips) {
  const r = await postClip(app.url, apiKey, fs.readFileSync(c.path), {
    response_format: 'json',
    language: 'en',
  });
  segmentText.push((JSON.parse(r.body) as { text: string }).text);
}
await app.close();

// ---- the realtime tier with the built-in engine ----
const config = loadConfig({
  STT_THREADS: '1',
  STT_STREAM_THREADS: '2',
  STT_STREAM_DECODERS: String(DECODERS),
  // Decoders load on demand (about a second each, more on a busy machine): no time limit in the way.
  STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
});
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const rssBefore = process.memoryUsage().rss;
// Load every streaming decoder (one stream each, one utterance of silence) to measure their memory.
{
  const streams = Array.from({ length: DECODERS }, () => engine.openStream());
  const utts = streams.map((s) => s.begin({})!);
  for (const u of utts) u.push(silence(200));
  await Promise.all(utts.map((u) => u.finish()));
  for (const s of streams) s.close();
}
const rssDecoders = process.memoryUsage().rss;
const perDecoderMb = mb(rssDecoders - rssBefore) / DECODERS;

const ctx: RealtimeTestContext = await createRealtimeContext({ engine });

interface Run {
  texts: string[];
  latencies: number[];
  fallbacks: number;
}

/** One session streaming every clip in turn at real-time pace (20 ms frames); `offset` rotates the order. */
async function session(offset: number): Promise<{ texts: string[]; latencies: number[] }> {
  const texts = new Array<string>(clips.length).fill('');
  const latencies: number[] = [];
  for (let k = 0; k < clips.length; k++) {
    const i = (k + offset) % clips.length;
    const { key } = await ctx.issueKey('pro');
    const cl = await connect(ctx.url, bearer(key));
    await cl.next('session.created');
    const stoppedAt = new Map<number, number>();
    cl.ws.on('message', (data) => {
      const ev = JSON.parse(String(data)) as { type: string; utterance_index: number };
      if (ev.type === STOPPED) stoppedAt.set(ev.utterance_index, performance.now());
      if (ev.type === COMPLETED) latencies.push(performance.now() - stoppedAt.get(ev.utterance_index)!);
    });
    await cl.stream(Buffer.concat([silence(300), pcmOf(clips[i].path), silence(900)]), {
      pace: 1,
      frameBytes: 640,
    });
    await cl.waitFor((evs) => {
      const stopped = evs.filter((e) => e.type === STOPPED).length;
      return stopped > 0 && evs.filter((e) => e.type === COMPLETED).length === stopped;
    }, 120_000);
    cl.ws.close(1000);
    await cl.closed;
    texts[i] = cl
      .of(COMPLETED)
      .sort((a, b) => a.utterance_index - b.utterance_index)
      .map((e) => e.text)
      .join(' ');
  }
  return { texts, latencies };
}

async function realtime(streams: number): Promise<Run> {
  const before = engine.streamingStats()!.fallbacks;
  const runs = await Promise.all(Array.from({ length: streams }, (_, s) => session(s)));
  return {
    texts: runs[0].texts,
    latencies: runs.flatMap((r) => r.latencies),
    fallbacks: engine.streamingStats()!.fallbacks - before,
  };
}

const one = await realtime(1);
const many = await realtime(STREAMS);
const rssPeak = process.memoryUsage().rss;

// ---- batch: the workflow's utterance split, each piece in the clip form (as api/batch/steps/transcribe.ts does) ----
const batchText: string[] = [];
for (const c of clips) {
  const pcm = pcmOf(c.path);
  const pieces = splitUtterances(energyEnvelope(pcm), pcm.length / 32000, {
    minPauseSeconds: config.batch.utteranceMinPauseSeconds,
    maxUtteranceSeconds: config.batch.utteranceMaxSeconds,
    minUtteranceSeconds: config.batch.utteranceMinSeconds,
  });
  const results = await Promise.all(
    pieces.map((p) => {
      const r = sliceByteRange(p);
      return engine.transcribe({ pcm: pcm.subarray(r.start, r.end), language: 'en' });
    }),
  );
  batchText.push(results.map((r) => r.text).join(' '));
}
await ctx.close();
await engine.close();

// ---- report ----
const nWords = clips.map((c) => c.reference.split(/\s+/).length);
const total = nWords.reduce((a, x) => a + x, 0);
const planes: [string, string[]][] = [
  ['segment (whole clip)', segmentText],
  ['realtime, 1 stream', one.texts],
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
for (const [name, r] of [
  ['1 stream', one],
  [`${STREAMS} streams`, many],
] as const)
  console.log(
    `| ${name} | ${r.latencies.length} | ${fmt(percentile(r.latencies, 50), 0)} ms | ${fmt(percentile(r.latencies, 90), 0)} ms | ${fmt(Math.max(...r.latencies), 0)} ms | ${r.fallbacks} |`,
  );
console.log(
  `\nmemory: ${DECODERS} streaming decoders add ${fmt(mb(rssDecoders - rssBefore), 0)} MiB RSS (${fmt(perDecoderMb, 1)} MiB each); ` +
    `RSS of this process (segment app closed, realtime tier + engine + ${STREAMS} sessions): ${fmt(mb(rssPeak), 0)} MiB`,
);
if (process.argv.includes('--texts'))
  for (const [name, texts] of planes)
    console.log(`\n${name}\n${texts.map((t, i) => `  ${clips[i].file}: ${t}`).join('\n')}`);
process.exit(0);
