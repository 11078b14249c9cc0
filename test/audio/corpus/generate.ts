/**
 * Generates the evaluation corpus of test/audio/corpus from the project's own
 * sentences (sentences.txt) with Debian's speech synthesizers: `flite` voices
 * and `espeak-ng`, assembled with `sox` (lead-in silence, pauses between
 * sentences, tempo, a noise floor). Deterministic: the same command writes the
 * same files (sox runs in repeatable mode), so the committed corpus can be
 * checked against its recipe.
 *
 *   npx tsx test/audio/corpus/generate.ts          # needs flite, espeak-ng, sox, ffmpeg
 *   npx tsx test/audio/corpus/generate.ts --turns  # only turns/ (see turns() below)
 *   npx tsx test/audio/corpus/generate.ts --held-out=/tmp/heldout
 *       # short clips from heldout.txt (sentences no tuning has seen), not committed:
 *       # benchmarks take them with CORPUS=/tmp/heldout to check a setting chosen on this corpus
 *
 * Writes:
 * - `short/*.flac`: 48 clips, 16 kHz mono, 2-3 sentences each, six voices (five flite, one espeak-ng),
 *   varied lead-in (0-2 s), pauses (0.4-2 s), tempo (0.9-1.1) and noise;
 * - `long/*.ogg`: 3 long-form files (5-7 minutes, 84 sentences, pauses of 0.5-3 s) for
 *   batch, Opus at 32 kb/s to keep the repository small;
 * - `corpus.tsv`: one row per file: its conditions, the reference text, and
 *   the speech intervals (start-end of each sentence, seconds) that reported
 *   word and segment times are checked against.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const RATE = 16_000;

interface Voice {
  id: string;
  synth: (text: string, out: string) => void;
}

const flite = (voice: string): Voice => ({
  id: `flite-${voice}`,
  synth: (text, out) => run('flite', ['-voice', voice, '-t', text, '-o', out]),
});
const espeak = (voice: string, speed: number): Voice => ({
  id: `espeak-${voice.replace('+', '-')}`,
  synth: (text, out) => run('espeak-ng', ['-v', voice, '-s', String(speed), '-w', out, text]),
});

export const VOICES: Voice[] = [
  flite('kal16'),
  flite('slt'),
  flite('rms'),
  flite('awb'),
  // kal is an 8 kHz voice: its clips are upsampled, as telephone audio is.
  flite('kal'),
  espeak('en-us+f2', 130),
];
const LEAD_INS = [0, 0.3, 0.5, 1.0, 1.5, 2.0];
const PAUSES = [0.4, 1.0, 1.5, 2.0];
const TEMPOS = [1.0, 0.9, 1.1];
/** Noise floor: none, or pink noise at this level (dB below full scale). */
const NOISES: (number | null)[] = [null, null, -50, -42];

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr?.toString() || r.error}`);
}

function samples(file: string): number {
  return Number(execFileSync('soxi', ['-s', file], { encoding: 'utf8' }).trim());
}

/** One sentence spoken by a voice: 16 kHz mono, tempo applied, silence trimmed off both ends. */
function sentence(tmp: string, voice: Voice, text: string, tempo: number, name: string): string {
  const raw = path.join(tmp, `${name}-raw.wav`);
  const out = path.join(tmp, `${name}.wav`);
  voice.synth(text, raw);
  const effects = ['rate', '-h', String(RATE)];
  if (tempo !== 1) effects.push('tempo', '-s', String(tempo));
  // Trim leading and trailing silence (below -50 dB) so the sentence's interval is its speech.
  effects.push('silence', '1', '0.01', '-50d', 'reverse', 'silence', '1', '0.01', '-50d', 'reverse');
  run('sox', ['-R', raw, '-c', '1', '-b', '16', out, 'remix', '-', ...effects]);
  return out;
}

function silence(tmp: string, seconds: number, name: string): string {
  const out = path.join(tmp, `${name}.wav`);
  run('sox', ['-R', '-n', '-r', String(RATE), '-c', '1', '-b', '16', out, 'trim', '0', seconds.toFixed(4)]);
  return out;
}

/** Writes one corpus.tsv row: file, voice, lead-in, pause, tempo, noise, its sentences. */
type Row = (
  file: string,
  voice: string,
  leadIn: number,
  pause: string,
  tempo: number,
  noise: number | null,
  pieces: Piece[],
) => void;

interface Piece {
  text: string;
  start: number;
  end: number;
}

/** Lead-in, sentences separated by pauses, a tail; noise mixed over the whole; written as FLAC. */
function assemble(
  tmp: string,
  out: string,
  parts: { file: string; text: string }[],
  leadIn: number,
  pauses: number[],
  noiseDb: number | null,
): Piece[] {
  const files: string[] = [];
  const pieces: Piece[] = [];
  let at = 0;
  const add = (file: string) => {
    files.push(file);
    at += samples(file);
  };
  if (leadIn > 0) add(silence(tmp, leadIn, `lead-${leadIn}`));
  parts.forEach((p, i) => {
    if (i > 0) add(silence(tmp, pauses[i - 1], `pause-${pauses[i - 1]}`));
    const start = at / RATE;
    add(p.file);
    pieces.push({ text: p.text, start, end: at / RATE });
  });
  add(silence(tmp, 0.8, 'tail'));
  const joined = path.join(tmp, 'joined.wav');
  run('sox', ['-R', ...files, joined]);
  if (noiseDb === null) {
    run('sox', ['-R', joined, out]);
  } else {
    const noise = path.join(tmp, 'noise.wav');
    const seconds = samples(joined) / RATE;
    run('sox', [
      '-R',
      '-n',
      '-r',
      String(RATE),
      '-c',
      '1',
      '-b',
      '16',
      noise,
      'synth',
      seconds.toFixed(4),
      'pinknoise',
      'gain',
      '-n',
      String(noiseDb),
    ]);
    run('sox', ['-R', '-m', '-v', '1', joined, '-v', '1', noise, '-b', '16', out]);
  }
  return pieces;
}

/**
 * The corpus into `dir`: short clips (and, unless `heldOut`, the long-form
 * files) from the sentences of `sentencesFile`, copied there as
 * sentences.txt for `loadCorpus`. A held-out corpus takes its conditions
 * from other positions of the cycles, so no clip repeats the committed one's.
 */
function main(dir: string, sentencesFile: string, heldOut: boolean): void {
  const HERE = dir;
  const sentences = fs.readFileSync(sentencesFile, 'utf8').trim().split('\n');
  if (path.resolve(sentencesFile) !== path.resolve(dir, 'sentences.txt'))
    fs.copyFileSync(sentencesFile, path.join(dir, 'sentences.txt'));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'corpus-'));
  for (const d of heldOut ? ['short'] : ['short', 'long']) {
    fs.rmSync(path.join(HERE, d), { recursive: true, force: true });
    fs.mkdirSync(path.join(HERE, d));
  }
  const shift = heldOut ? 1 : 0;
  const rows = ['file\tvoice\tlead_in\tpause\ttempo\tnoise_db\treference\tspeech'];
  const row: Row = (file, voice, leadIn, pause, tempo, noise, pieces) =>
    rows.push(
      [
        file,
        voice,
        leadIn,
        pause,
        tempo,
        noise ?? '',
        pieces.map((p) => p.text).join(' '),
        pieces.map((p) => `${p.start.toFixed(3)}-${p.end.toFixed(3)}`).join(' '),
      ].join('\t'),
    );

  // Short clips: 8 per voice; conditions cycle on co-prime periods so they combine in many ways.
  let n = 0;
  for (let v = 0; v < VOICES.length; v++) {
    for (let k = 0; k < 8; k++, n++) {
      const voice = VOICES[v];
      const count = 2 + (n % 2);
      const texts = Array.from(
        { length: count },
        (_, i) => sentences[(n * 5 + i * 7 + v) % sentences.length],
      );
      const leadIn = LEAD_INS[(n + shift) % LEAD_INS.length];
      const pause = PAUSES[(n + v + shift) % PAUSES.length];
      const tempo = TEMPOS[(n + k + shift) % TEMPOS.length];
      const noise = NOISES[(n * 3 + v + shift) % NOISES.length];
      const parts = texts.map((text, i) => ({ text, file: sentence(tmp, voice, text, tempo, `s${i}`) }));
      const name = `short/${String(n).padStart(2, '0')}-${voice.id}.flac`;
      const pauses = Array.from({ length: count - 1 }, () => pause);
      const pieces = assemble(tmp, path.join(HERE, name), parts, leadIn, pauses, noise);
      row(name, voice.id, leadIn, String(pause), tempo, noise, pieces);
    }
  }

  if (!heldOut) longForm(HERE, tmp, sentences, row);
  fs.writeFileSync(path.join(HERE, 'corpus.tsv'), rows.join('\n') + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`corpus: ${rows.length - 1} files in ${HERE}`);
}

/** Long-form: every sentence once, each file one voice, pauses of 0.5-3 s in a fixed irregular pattern. */
function longForm(HERE: string, tmp: string, sentences: string[], row: Row): void {
  // Long-form: every sentence once, each file one voice, pauses of 0.5-3 s in a fixed irregular pattern.
  const longVoices = [VOICES[0], VOICES[2], VOICES[5]];
  const longPauses = [0.5, 1.2, 3.0, 0.8, 2.0, 0.6, 1.6, 2.5];
  longVoices.forEach((voice, f) => {
    const order = Array.from({ length: 84 }, (_, i) => sentences[(i * 7 + f * 11) % sentences.length]);
    const parts = order.map((text, i) => ({ text, file: sentence(tmp, voice, text, TEMPOS[f], `l${i}`) }));
    const pauses = parts.slice(1).map((_, i) => longPauses[(i + f) % longPauses.length]);
    const name = `long/${f}-${voice.id}.ogg`;
    const noise = f === 2 ? -50 : null;
    const wav = path.join(tmp, 'long.wav');
    const pieces = assemble(tmp, wav, parts, 1.0 + f * 0.5, pauses, noise);
    // Opus keeps the long files small (and is one more upload format); its pre-skip is trimmed on decode.
    run('ffmpeg', [
      '-nostdin',
      '-loglevel',
      'error',
      '-y',
      '-i',
      wav,
      '-c:a',
      'libopus',
      '-b:a',
      '32k',
      '-map_metadata',
      '-1',
      '-fflags',
      '+bitexact',
      path.join(HERE, name),
    ]);
    row(name, voice.id, 1.0 + f * 0.5, longPauses.join(','), TEMPOS[f], noise, pieces);
  });
}

/**
 * `turns/*.flac` and `turns.tsv` (`--turns`): each clip is one sentence
 * spoken in two halves with a short pause inside it (after a word the
 * sentence plainly goes on from), then a longer pause and a second sentence.
 * End-of-turn detection must not end the turn at the pause inside the
 * sentence and should end it soon after the sentence. The halves are
 * synthesized separately, so each ends as a phrase does.
 */
function turns(): void {
  const lines = fs.readFileSync(path.join(HERE, 'turns.txt'), 'utf8').trim().split('\n');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'corpus-turns-'));
  const dir = path.join(HERE, 'turns');
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir);
  const rows = ['file\tvoice\tinner_pause\treference\tspeech'];
  const voices = VOICES.filter((v) => v.id !== 'flite-kal');
  const innerPauses = [0.35, 0.45, 0.3, 0.4];
  lines.forEach((line, n) => {
    const [first, second] = line.split('\t');
    const [head, tail] = first.split(' | ');
    const voice = voices[n % voices.length];
    const tempo = TEMPOS[n % TEMPOS.length];
    const texts = [head, tail, second];
    const parts = texts.map((text, i) => ({ text, file: sentence(tmp, voice, text, tempo, `t${i}`) }));
    const inner = innerPauses[n % innerPauses.length];
    const name = `turns/${String(n).padStart(2, '0')}-${voice.id}.flac`;
    const pieces = assemble(tmp, path.join(HERE, name), parts, 0.3, [inner, 1.2], n % 3 === 2 ? -50 : null);
    rows.push(
      [
        name,
        voice.id,
        inner,
        texts.join(' '),
        pieces.map((p) => `${p.start.toFixed(3)}-${p.end.toFixed(3)}`).join(' '),
      ].join('\t'),
    );
  });
  fs.writeFileSync(path.join(HERE, 'turns.tsv'), rows.join('\n') + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`corpus: ${rows.length - 1} turn clips in ${dir}`);
}

const heldOutDir = process.argv.find((a) => a.startsWith('--held-out='))?.slice(11);
if (process.argv.includes('--turns')) turns();
else if (heldOutDir) {
  fs.mkdirSync(heldOutDir, { recursive: true });
  main(heldOutDir, path.join(HERE, 'heldout.txt'), true);
} else main(HERE, path.join(HERE, 'sentences.txt'), false);
