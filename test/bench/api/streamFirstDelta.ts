/**
 * `stream=true` on a minute of speech (issue 39 target: the first delta
 * within 2 s of the upload's end, built-in engine). The real app and engine
 * in this process, the official `openai` SDK as the client; prints, per
 * round, when the first delta and the done event arrived after the upload
 * was sent and the word error rate of the full text, and the medians.
 *
 *   npx tsx test/bench/api/streamFirstDelta.ts [--rounds=3]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { startSpeechApp } from '../../speech/app.js';
import { buildMinuteOfSpeech, MINUTE_OF_SPEECH_CLIPS } from '../../batch/helpers.js';
import { refs } from '../../realtime/helpers.js';
import { wer } from '../../speech/helpers.js';

const rounds = Number(process.argv.find((a) => a.startsWith('--rounds='))?.split('=')[1] ?? 3);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-stream-'));
const minute = fs.readFileSync(buildMinuteOfSpeech(path.join(dir, 'minute.wav')));
const t = await startSpeechApp({ LOG_LEVEL: 'warn', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const { key } = await t.issueKey('pro');
const client = new OpenAI({ apiKey: key, baseURL: `${t.url}/v1`, maxRetries: 0 });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const first: number[] = [];
const done: number[] = [];
const errors: number[] = [];
const reference = MINUTE_OF_SPEECH_CLIPS.map((c) => refs().get(c)!).join(' ');
for (let i = 0; i < rounds; i++) {
  const t0 = performance.now();
  const stream = await client.audio.transcriptions.create({
    file: await toFile(minute, 'minute.wav', { type: 'audio/wav' }),
    model: 'whisper-1',
    stream: true,
  });
  let firstAt = NaN;
  for await (const e of stream) {
    if (e.type === 'transcript.text.delta' && Number.isNaN(firstAt)) firstAt = performance.now() - t0;
    if (e.type === 'transcript.text.done') {
      done.push(performance.now() - t0);
      errors.push(wer(reference, e.text));
    }
  }
  first.push(firstAt);
  console.log(
    `round ${i + 1}: first delta ${Math.round(firstAt)} ms, done ${Math.round(done.at(-1)!)} ms, WER ${(100 * errors.at(-1)!).toFixed(1)} %`,
  );
}
console.log(
  `stream=true, ${(minute.length / 32000).toFixed(1)} s of speech: first delta median ${Math.round(median(first))} ms, done median ${Math.round(median(done))} ms, WER ${(100 * median(errors)).toFixed(1)} % (target: first delta <= 2000 ms)`,
);
await t.close();
fs.rmSync(dir, { recursive: true, force: true });
