/**
 * WER per clip: PocketSphinx called directly (built-in engine) versus the
 * same clips uploaded to the segment endpoint (verbose_json). Both must
 * agree word for word: the endpoint adds no loss.
 *
 *   npx tsx test/bench/speech/wer.ts
 */
import fs from 'node:fs';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { loadClips, wer } from '../../speech/helpers.js';
import { startSpeechApp } from '../../speech/app.js';
import { fmt, pcmOfWav, postClip } from './common.js';

const clips = loadClips();
const direct = new BuiltinEngine(
  loadConfig({ STT_THREADS: '1' }).speech.builtin,
  createLogger({ level: 'silent' }),
);
await direct.ready();
const directText: string[] = [];
for (const c of clips) directText.push((await direct.transcribe({ pcm: pcmOfWav(c.path) })).text);
await direct.close();

const app = await startSpeechApp({ STT_THREADS: '1' });
const { key } = await app.issueKey('pro');
const endpointText: string[] = [];
for (const c of clips) {
  const r = await postClip(app.url, key, fs.readFileSync(c.path), { response_format: 'json' });
  endpointText.push((JSON.parse(r.body) as { text: string }).text);
}
await app.close();

console.log('| clip | seconds | WER direct | WER endpoint | same text |');
console.log('|---|---|---|---|---|');
let refWords = 0;
let errDirect = 0;
let errEndpoint = 0;
clips.forEach((c, i) => {
  const n = c.reference.split(/\s+/).length;
  const wd = wer(c.reference, directText[i]);
  const we = wer(c.reference, endpointText[i]);
  refWords += n;
  errDirect += wd * n;
  errEndpoint += we * n;
  console.log(
    `| ${c.file} | ${fmt(c.seconds, 2)} | ${fmt(wd * 100)}% | ${fmt(we * 100)}% | ${directText[i] === endpointText[i] ? 'yes' : 'no'} |`,
  );
});
console.log(
  `| **all (word-weighted)** | | ${fmt((errDirect / refWords) * 100)}% | ${fmt((errEndpoint / refWords) * 100)}% | |`,
);
process.exit(0);
