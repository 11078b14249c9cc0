/**
 * What the realtime silence window costs in words (issue 21): every clip
 * streamed at real-time pace in 20 ms frames, four sessions at a time, once
 * per window; word-weighted WER per window and per clip (utterances in
 * brackets). Clips: the six recorded (test/audio), the twelve `turns` clips
 * (0.3-0.45 s pauses inside sentences) and the 48 generated short clips.
 *
 *   npx tsx test/bench/speech/windows.ts 0,200,500     # 0: the default session (sentence ends on)
 *   TEXTS=1 npx tsx test/bench/speech/windows.ts 0     # with each clip's texts
 *
 * A window given is set with `vad_silence_ms` (which turns sentence ends off).
 * Real-time pace matters: sent faster, short windows make more utterances in
 * flight than the plan allows and audio is dropped (`service.throttled`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { wer, loadClips, pcmOf } from '../../speech/helpers.js';
import { CORPUS_DIR, corpusPcm, loadCorpus, type CorpusClip } from '../../speech/corpus.js';
import { createRealtimeContext, connect, bearer, silence } from '../../realtime/helpers.js';

const WINDOWS = (process.argv[2] ?? '0,300').split(',').map(Number);
const SESSIONS = 4;
const COMPLETED = 'conversation.item.input_audio_transcription.completed';

const config = loadConfig({ STT_THREADS: '2', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const ctx = await createRealtimeContext({ engine });

const items: { name: string; ref: string; pcm: Buffer }[] = [];
for (const c of loadClips()) items.push({ name: c.file, ref: c.reference, pcm: pcmOf(c.path) });
for (const row of fs.readFileSync(path.join(CORPUS_DIR, 'turns.tsv'), 'utf8').trim().split('\n').slice(1)) {
  const [file, , , reference] = row.split('\t');
  items.push({
    name: file,
    ref: reference,
    pcm: corpusPcm({ path: path.join(CORPUS_DIR, file) } as CorpusClip),
  });
}
for (const c of loadCorpus('short')) items.push({ name: c.file, ref: c.reference, pcm: corpusPcm(c) });

async function run(pcm: Buffer, windowMs: number): Promise<string[]> {
  const { key } = await ctx.issueKey('pro');
  const cl = await connect(ctx.url, bearer(key));
  await cl.next('session.created');
  if (windowMs) cl.send({ type: 'session.update', vad_silence_ms: windowMs });
  await cl.stream(Buffer.concat([silence(300), pcm, silence(1500)]), { pace: 1, frameBytes: 640 });
  await cl.finals(120_000);
  cl.ws.close(1000);
  await cl.closed;
  return cl
    .of(COMPLETED)
    .sort((a, b) => a.utterance_index - b.utterance_index)
    .map((e) => e.text as string);
}

const totals = new Map(WINDOWS.map((w) => [w, { errors: 0, words: 0 }]));
let next = 0;
async function worker(): Promise<void> {
  for (let i = next++; i < items.length; i = next++) {
    const it = items[i];
    const words = it.ref.split(' ').length;
    const cells: string[] = [];
    const texts: string[] = [];
    for (const w of WINDOWS) {
      const utterances = await run(it.pcm, w);
      const e = wer(it.ref, utterances.join(' '));
      totals.get(w)!.errors += e * words;
      totals.get(w)!.words += words;
      cells.push(`${(100 * e).toFixed(1)} (${utterances.length})`);
      texts.push(`  ${w || 'default'}: ${utterances.join(' | ')}`);
    }
    console.log(`| ${it.name} | ${cells.join(' | ')} |`);
    if (process.env.TEXTS) console.log(texts.join('\n'));
  }
}
console.log(`| clip | ${WINDOWS.map((w) => (w ? `${w} ms` : 'default')).join(' | ')} |`);
console.log(`|---|${WINDOWS.map(() => '---').join('|')}|`);
await Promise.all(Array.from({ length: SESSIONS }, worker));
console.log(
  `| all (word-weighted) | ${WINDOWS.map((w) => `${((100 * totals.get(w)!.errors) / totals.get(w)!.words).toFixed(1)}%`).join(' | ')} |`,
);
await ctx.close();
await engine.close();
process.exit(0);
