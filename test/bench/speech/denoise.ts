/**
 * A denoising front end before the built-in engine (issue 37, "honest limits
 * by condition"): word-weighted WER of the clip form on the general corpus
 * (test/audio/corpus/short, 48 clips) clean and with pink noise mixed in at a
 * given SNR (speech RMS over its loud samples against the noise's RMS), each
 * decoded as it is and after each ffmpeg filter listed.
 *
 *   npx tsx test/bench/speech/denoise.ts [--snr=clean,15,10] [--filters='|afftdn|afftdn=tn=1']
 *
 * An empty filter is the audio as it is. The noise is sox's pink noise in
 * repeatable mode, so runs compare.
 */
import { execFileSync } from 'node:child_process';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { wer } from '../../speech/helpers.js';
import { loadCorpus, corpusPcm } from '../../speech/corpus.js';
import { fmt } from './common.js';

const arg = (name: string, def: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? def;
const SNRS = arg('snr', 'clean,15,10').split(',');
const FILTERS = arg('filters', '|afftdn|afftdn=tn=1|afftdn=nr=20:tn=1').split('|');
const RAW = ['-f', 's16le', '-ar', '16000', '-ac', '1'];

const filtered = (pcm: Buffer, filter: string): Buffer =>
  filter
    ? execFileSync('ffmpeg', ['-v', 'error', ...RAW, '-i', '-', '-af', filter, ...RAW, '-'], {
        input: pcm,
        maxBuffer: 1 << 28,
      })
    : pcm;

/** `pcm` with pink noise `snr` dB below the speech's RMS (over samples above -40 dBFS). */
function withNoise(pcm: Buffer, snr: number): Buffer {
  const n = pcm.length / 2;
  const noise = execFileSync(
    'sox',
    [
      '-R',
      '-n',
      '-t',
      's16',
      '-r',
      '16000',
      '-c',
      '1',
      '-',
      'synth',
      String(n / 16000),
      'pinknoise',
      'vol',
      '0.5',
    ],
    { maxBuffer: 1 << 28 },
  );
  let speech = 0;
  let loud = 0;
  let noisePower = 0;
  for (let i = 0; i < n; i++) {
    const s = pcm.readInt16LE(2 * i);
    if (Math.abs(s) > 300) {
      speech += s * s;
      loud++;
    }
    const x = 2 * i < noise.length ? noise.readInt16LE(2 * i) : 0;
    noisePower += x * x;
  }
  const gain = Math.sqrt(speech / Math.max(1, loud) / (noisePower / n)) / 10 ** (snr / 20);
  const out = Buffer.alloc(pcm.length);
  for (let i = 0; i < n; i++) {
    const x = 2 * i < noise.length ? noise.readInt16LE(2 * i) : 0;
    const v = Math.round(pcm.readInt16LE(2 * i) + gain * x);
    out.writeInt16LE(Math.max(-32768, Math.min(32767, v)), 2 * i);
  }
  return out;
}

const config = loadConfig({ STT_THREADS: '2', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
await engine.ready();
const sums = new Map<string, [number, number]>();
for (const c of loadCorpus('short')) {
  const clean = corpusPcm(c);
  const n = c.reference.split(/\s+/).length;
  for (const snr of SNRS) {
    const pcm = snr === 'clean' ? clean : withNoise(clean, Number(snr));
    await Promise.all(
      FILTERS.map(async (f) => {
        const r = await engine.transcribe({ pcm: filtered(pcm, f) });
        const key = `| ${snr === 'clean' ? 'clean' : `${snr} dB`} | ${f || '(none)'} |`;
        const s = sums.get(key) ?? [0, 0];
        s[0] += wer(c.reference, r.text) * n;
        s[1] += n;
        sums.set(key, s);
      }),
    );
  }
}
console.log('| audio | filter | WER |\n|---|---|---|');
for (const [k, [e, n]] of sums) console.log(`${k} ${fmt((100 * e) / n)} % |`);
await engine.close();
