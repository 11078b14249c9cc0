/**
 * Whether a turn-end level keeps today's words on test/audio/jfk.wav (issue
 * 38: the default may change only if it does): per level, jfk.wav on the
 * native stream at 16 kHz and on /v1/realtime at 24 kHz and 16 kHz (ffmpeg's
 * conversion, as test/realtime/openai.test.ts sends it), the number of turns
 * and the WER of their joined finals. Audio goes as fast as the server takes
 * it (the segmenter waits for each verdict: the cuts depend on the audio only).
 *
 *   npx tsx test/bench/realtime/turnsJfk.ts [--levels=default,low,medium,high]
 */
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { wer } from '../../speech/helpers.js';
import { createRealtimeContext, connect, bearer, refs, type Client } from '../../realtime/helpers.js';
import { pcmAt } from '../../realtime/openaiHelpers.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const LEVELS = (
  process.argv.find((a) => a.startsWith('--levels='))?.split('=')[1] ?? 'default,low,medium,high'
).split(',');
const REF = refs().get('jfk.wav')!;

const config = loadConfig({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const ctx = await createRealtimeContext({ engine, env: { REALTIME_TRANSCRIBE_TIMEOUT_MS: '120000' } });
const openaiUrl = `ws://127.0.0.1:${ctx.rt.port}/v1/realtime?intent=transcription`;

/** Every started turn stopped and every stopped one has its final, and nothing new for a second. */
const settle = (c: Client, stopped: string) =>
  c.finals(200_000, 1000, (evs) => {
    const n = (type: string) => evs.filter((e) => e.type === type).length;
    return (
      n(stopped) > 0 && n('input_audio_buffer.speech_started') === n(stopped) && n(COMPLETED) === n(stopped)
    );
  });

async function openai(level: string, rate: number): Promise<string[]> {
  const { key } = await ctx.issueKey('pro');
  const c = await connect(openaiUrl, bearer(key));
  await c.next('session.created');
  const turn = level === 'default' ? undefined : { type: 'semantic_vad', eagerness: level };
  const input = { format: { type: 'audio/pcm', rate }, ...(turn ? { turn_detection: turn } : {}) };
  c.send({ type: 'session.update', session: { type: 'transcription', audio: { input } } });
  await c.next('session.updated');
  const all = Buffer.concat([pcmAt('jfk.wav', rate), Buffer.alloc(rate * 2 * 1.2)]);
  for (let off = 0; off < all.length; off += rate / 5)
    c.send({
      type: 'input_audio_buffer.append',
      audio: all.subarray(off, off + rate / 5).toString('base64'),
    });
  await settle(c, 'input_audio_buffer.speech_stopped');
  c.ws.close(1000);
  return c.of(COMPLETED).map((e) => e.transcript as string);
}

async function native(level: string): Promise<string[]> {
  const { key } = await ctx.issueKey('pro');
  const c = await connect(ctx.url, bearer(key));
  await c.next('session.created');
  if (level !== 'default') {
    c.send({ type: 'session.update', vad_eagerness: level });
    await c.next('session.updated');
  }
  await c.stream(Buffer.concat([pcmAt('jfk.wav', 16000), Buffer.alloc(38400)]));
  await c.finals(200_000);
  c.ws.close(1000);
  return c
    .of(COMPLETED)
    .sort((a, b) => a.utterance_index - b.utterance_index)
    .map((e) => e.text as string);
}

console.log('| level | path | turns | WER | finals |');
console.log('|---|---|---|---|---|');
for (const level of LEVELS) {
  for (const [path, get] of [
    ['native 16 kHz', () => native(level)],
    ['/v1/realtime 24 kHz', () => openai(level, 24000)],
    ['/v1/realtime 16 kHz', () => openai(level, 16000)],
  ] as const) {
    const finals = await get();
    const w = wer(REF, finals.join(' '));
    console.log(
      `| ${level} | ${path} | ${finals.length} | ${(100 * w).toFixed(1)} % | ${finals.join(' / ')} |`,
    );
  }
}
await ctx.close();
await engine.close();
process.exit(0);
