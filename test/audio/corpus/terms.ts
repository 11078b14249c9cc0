/**
 * Generates the prompt-biasing corpus (issue 37) from terms.txt: each
 * sentence spoken by three synthesizers (a flite voice, espeak-ng, festival),
 * each clip under one condition of the cycle below, with a short lead-in and
 * tail of silence. Deterministic (sox in repeatable mode), so the committed
 * clips can be checked against their recipe.
 *
 *   npx tsx test/audio/corpus/terms.ts   # needs flite, espeak-ng, festival (kal, us_slt_arctic_hts), sox
 *
 * Writes `terms/*.flac` (16 kHz mono) and `terms.tsv`: file, set (tune or
 * held), voice, condition, reference, and the prompt that lists the terms.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const run = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });

type Synth = { id: string; say: (text: string, out: string) => void };
const festival = (id: string, voice: string): Synth => ({
  id,
  say: (text, out) => {
    const txt = `${out}.txt`;
    fs.writeFileSync(txt, text);
    run('text2wave', ['-eval', `(${voice})`, '-o', out, txt]);
  },
});
const FLITE = ['slt', 'rms', 'awb', 'kal16'];
const ESPEAK = ['en-us+m3', 'en-us+f2', 'en-us'];
const FESTIVAL = [
  festival('festival-kal', 'voice_kal_diphone'),
  festival('festival-slt-hts', 'voice_cmu_us_slt_arctic_hts'),
];

/** Conditions in turn: the clip's effects after it is resampled to 16 kHz mono. */
export const CONDITIONS: Record<string, string[]> = {
  clean: [],
  // Pink noise at about 15 dB below the speech (the speech is normalised to -3 dBFS peak first).
  noise: ['gain', '-n', '-3'],
  telephone: ['sinc', '300-3400'],
  fast: ['tempo', '1.2'],
  reverb: ['reverb', '40', '50', '70', 'gain', '-n', '-3'],
};
const ORDER = Object.keys(CONDITIONS);

function synthFor(sentence: number, k: number): Synth {
  if (k === 0) {
    const v = FLITE[sentence % FLITE.length];
    return { id: `flite-${v}`, say: (text, out) => run('flite', ['-voice', v, '-t', text, '-o', out]) };
  }
  if (k === 1) {
    const v = ESPEAK[sentence % ESPEAK.length];
    return {
      id: `espeak-${v.replace('+', '-')}`,
      say: (text, out) => run('espeak-ng', ['-v', v, '-s', '150', '-w', out, text]),
    };
  }
  return FESTIVAL[sentence % FESTIVAL.length];
}

export interface TermsRow {
  file: string;
  set: 'tune' | 'held';
  voice: string;
  condition: string;
  reference: string;
  prompt: string;
}

export function loadTerms(): TermsRow[] {
  const lines = fs.readFileSync(path.join(HERE, 'terms.tsv'), 'utf8').trim().split('\n').slice(1);
  return lines.map((l) => {
    const [file, set, voice, condition, reference, prompt] = l.split('\t');
    return { file: path.join(HERE, file), set: set as 'tune' | 'held', voice, condition, reference, prompt };
  });
}

/** A terms clip by file name (`00-0-flite-slt-clean.flac`): its row and its 16 kHz mono PCM16 samples. */
export function termsClip(name: string): TermsRow & { pcm: Buffer } {
  const row = loadTerms().find((c) => c.file.endsWith(name));
  if (!row) throw new Error(`no terms clip ${name}`);
  const pcm = execFileSync(
    'ffmpeg',
    ['-v', 'error', '-i', row.file, '-f', 's16le', '-ac', '1', '-ar', '16000', '-'],
    {
      maxBuffer: 1 << 26,
    },
  );
  return { ...row, pcm };
}

function main(): void {
  const rows = fs
    .readFileSync(path.join(HERE, 'terms.txt'), 'utf8')
    .split('\n')
    .filter((l) => l.trim() && !l.startsWith('#'))
    .map((l) => l.split('\t'));
  const dir = path.join(HERE, 'terms');
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'terms-'));
  const out = ['file\tset\tvoice\tcondition\treference\tprompt'];
  rows.forEach(([set, sentence, prompt], i) => {
    for (let k = 0; k < 3; k++) {
      const synth = synthFor(i, k);
      const condition = ORDER[(i * 3 + k) % ORDER.length];
      const raw = path.join(tmp, `${i}-${k}.wav`);
      synth.say(sentence, raw);
      const name = `terms/${String(i).padStart(2, '0')}-${k}-${synth.id}-${condition}.flac`;
      const file = path.join(HERE, name);
      const effects = [...CONDITIONS[condition], 'pad', '0.4', '0.6'];
      if (condition === 'noise') {
        const speech = path.join(tmp, `${i}-${k}-speech.wav`);
        run('sox', ['-R', raw, '-r', '16000', '-c', '1', '-b', '16', speech, 'remix', '-', ...effects]);
        const secs = execFileSync('soxi', ['-D', speech], { encoding: 'utf8' }).trim();
        const noise = path.join(tmp, `${i}-${k}-noise.wav`);
        run('sox', [
          '-R',
          '-n',
          '-r',
          '16000',
          '-c',
          '1',
          '-b',
          '16',
          noise,
          'synth',
          secs,
          'pinknoise',
          'gain',
          '-18',
        ]);
        run('sox', ['-R', '-m', speech, noise, file]);
      } else run('sox', ['-R', raw, '-r', '16000', '-c', '1', '-b', '16', file, 'remix', '-', ...effects]);
      out.push([name, set, synth.id, condition, sentence, prompt].join('\t'));
    }
  });
  fs.writeFileSync(path.join(HERE, 'terms.tsv'), out.join('\n') + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`${out.length - 1} clips in ${dir}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
