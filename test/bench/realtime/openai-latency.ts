/**
 * The OpenAI Realtime endpoint against the native stream, side by side
 * (issue 25): the same clips, at real-time pace in 20 ms frames, through one
 * realtime tier (real uWS server, silero VAD, built-in engine), alternating
 * native (binary PCM16 at 16 kHz), /v1/realtime at 16 kHz and at 24 kHz
 * (base64 appends, OpenAI's wire protocol as its SDK sends it). Prints, per
 * endpoint, the time from the clip's last sample sent to its last
 * `completed` event (silence detection included) and from `speech_stopped`
 * to `completed`, p50 and p95 over every clip and round, and the ratio of
 * the medians to native.
 *
 *   npx tsx test/bench/realtime/openai-latency.ts [--rounds=3]
 */
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { bearer, connect, createRealtimeContext, readPcm, type Client } from '../../realtime/helpers.js';
import { pcmAt } from '../../realtime/openaiHelpers.js';

const rounds = Number(process.argv.find((a) => a.startsWith('--rounds='))?.split('=')[1] ?? 3);
const CLIPS = [
  'jfk.wav',
  'librivox-austen-0870.wav',
  'librivox-austen-0880.wav',
  'librispeech-1089-134686-0001.wav',
];
const NATIVE_COMPLETED = 'conversation.item.input_audio_transcription.completed';
const STOPPED = 'input_audio_buffer.speech_stopped';

type Variant = 'native' | 'openai-16k' | 'openai-24k';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sends `pcm` (then 1.5 s of silence) in 20 ms frames at real-time pace; resolves with when its last speech sample left. */
async function paced(c: Client, pcm: Buffer, rate: number, openai: boolean): Promise<number> {
  const frame = (rate / 50) * 2;
  const all = Buffer.concat([pcm, Buffer.alloc(rate * 3)]);
  const t0 = performance.now();
  let lastSpeech = 0;
  for (let off = 0, i = 0; off < all.length; off += frame, i++) {
    const chunk = all.subarray(off, off + frame);
    if (openai) c.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') });
    else c.ws.send(chunk);
    if (off + frame >= pcm.length && lastSpeech === 0) lastSpeech = performance.now();
    const due = t0 + (i + 1) * 20;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
  }
  return lastSpeech;
}

async function once(url: string, key: string, variant: Variant, clip: string) {
  const openai = variant !== 'native';
  const rate = variant === 'openai-24k' ? 24000 : 16000;
  const pcm = variant === 'openai-24k' ? pcmAt(clip, 24000) : readPcm(clip);
  const c = await connect(
    openai ? `${url.replace(/\/v1\/.*$/, '')}/v1/realtime?intent=transcription` : url,
    bearer(key),
  );
  await c.next(openai ? 'session.created' : 'session.created');
  if (openai) {
    c.send({
      type: 'session.update',
      session: {
        type: 'transcription',
        audio: { input: { format: { type: 'audio/pcm', rate }, turn_detection: { type: 'server_vad' } } },
      },
    });
    await c.next('session.updated');
  }
  const completedAt = new Map<number, number>();
  const stoppedAt = new Map<number, number>();
  let n = 0;
  c.ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    const e = JSON.parse(data.toString()) as { type: string };
    if (e.type === STOPPED) stoppedAt.set(n, performance.now());
    if (e.type === NATIVE_COMPLETED) completedAt.set(n++, performance.now());
  });
  const lastSpeech = await paced(c, pcm, rate, openai);
  await c.waitFor(() => completedAt.size > 0 && completedAt.size >= stoppedAt.size, 60_000);
  await sleep(200);
  const last = Math.max(...completedAt.values());
  const perUtterance = [...completedAt.entries()]
    .filter(([i]) => stoppedAt.has(i))
    .map(([i, t]) => t - stoppedAt.get(i)!);
  c.ws.close(1000);
  await c.closed;
  return { endToFinal: last - lastSpeech, stoppedToCompleted: perUtterance };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

const config = loadConfig({ STT_THREADS: '2' });
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const ctx = await createRealtimeContext({ engine });
try {
  const { key } = await ctx.issueKey('pro');
  const results: Record<Variant, { end: number[]; stop: number[] }> = {
    native: { end: [], stop: [] },
    'openai-16k': { end: [], stop: [] },
    'openai-24k': { end: [], stop: [] },
  };
  for (let r = 0; r < rounds; r++) {
    for (const clip of CLIPS) {
      for (const v of ['native', 'openai-16k', 'openai-24k'] as Variant[]) {
        const x = await once(ctx.url, key, v, clip);
        results[v].end.push(x.endToFinal);
        results[v].stop.push(...x.stoppedToCompleted);
      }
    }
    process.stderr.write(`round ${r + 1}/${rounds}\n`);
  }
  const base = pct(results.native.end, 50);
  console.log(
    '| endpoint | last sample → final p50 | p95 | speech_stopped → completed p50 | p95 | median vs native |',
  );
  console.log('|---|---|---|---|---|---|');
  for (const [v, x] of Object.entries(results)) {
    console.log(
      `| ${v} | ${pct(x.end, 50).toFixed(0)} ms | ${pct(x.end, 95).toFixed(0)} ms | ${pct(x.stop, 50).toFixed(0)} ms | ${pct(x.stop, 95).toFixed(0)} ms | ${(pct(x.end, 50) / base).toFixed(2)} |`,
    );
  }
} finally {
  await ctx.close();
  await engine.close();
}
