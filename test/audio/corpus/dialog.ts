/**
 * The turn corpus of issue 38 (turn ends a voice agent can rely on): clips of
 * four turns each, one second apart, spoken by eight voices of three
 * synthesizers (flite, espeak-ng, festival) in four conditions (clean, pink
 * noise, telephone band, faster speech with reverberation). The turns come
 * from dialog.txt: sentences with commas, lists, hesitations ("um", "uh",
 * "so") and, where a line has `|`, a pause of 0.3-0.9 s inside the sentence;
 * questions and short answers ("yes.", "no, thanks."). A pause is made where
 * the synthesizer itself paused (a comma in the text it reads; an SSML break
 * for espeak-ng) and then stretched, so the words before it keep the
 * intonation of a phrase that goes on, not of a sentence end.
 *
 *   npx tsx test/audio/corpus/dialog.ts                       # dialog/ and dialog.tsv (tuning part)
 *   npx tsx test/audio/corpus/dialog.ts --held-out=/tmp/dh    # from dialog-heldout.txt: never tuned on
 *
 * dialog.tsv: file, voice, condition, the turns' texts (` / ` between turns),
 * each turn's speech interval (first to last sample, seconds) and the pauses
 * inside it. Deterministic (sox in repeatable mode).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const RATE = 16_000;
/** Between turns: the merge test (two sentences one second apart must give two finals). */
const TURN_GAP_S = 1.0;
/** Pauses inside sentences, in turn (seconds). */
const INNER = [0.6, 0.3, 0.9, 0.45, 0.75];
const CONDITIONS = ['clean', 'noise', 'phone', 'fast-reverb'] as const;
type Condition = (typeof CONDITIONS)[number];

function sh(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr || r.error}`);
  return r.stdout;
}

/** A synthesized sentence: its wav and the pauses the synthesizer made (end of each pause, seconds). */
interface Synth {
  id: string;
  /** Writes `out`; returns the [start, end] of every pause inside the speech, in order. */
  say(text: string, breaks: number[], out: string, tmp: string): [number, number][] | null;
}

/** Segment list "pau:0.24 ay:0.39 ..." (end times) to the inner pauses. */
function innerPauses(segs: string): [number, number][] {
  const list = segs
    .trim()
    .split(/\s+/)
    .map((s) => s.split(':'))
    .map(([name, end]) => ({ name, end: Number(end) }));
  const out: [number, number][] = [];
  for (let i = 1; i < list.length - 1; i++)
    if (list[i].name === 'pau') out.push([list[i - 1].end, list[i].end]);
  return out;
}

const flite = (voice: string): Synth => ({
  id: `flite-${voice}`,
  say: (text, _b, out) => innerPauses(sh('flite', ['-voice', voice, '-psdur', '-t', text, '-o', out])),
});
/** Festival may not pause at a comma after a function word: its pauses are cut at the word ends instead. */
const festival = (voice: string, id: string): Synth => ({
  id: `festival-${id}`,
  say: (text, breaks, out, tmp) => {
    const scm = path.join(tmp, 'say.scm');
    fs.writeFileSync(
      scm,
      `(voice_${voice})\n(set! utt (Utterance Text ${JSON.stringify(text)}))\n(utt.synth utt)\n` +
        `(utt.save.wave utt ${JSON.stringify(out)} 'riff)\n` +
        `(mapcar (lambda (w) (format t "%s:%f " (item.name w) (item.feat w "word_end"))) (utt.relation.items utt 'Word))\n`,
    );
    const ends = sh('festival', ['--batch', scm])
      .trim()
      .split(/\s+/)
      .map((w) => Number(w.split(':')[1]));
    // The words before each `,` (a `|`): the pause goes right after the last of them.
    const cuts = text
      .split(',')
      .slice(0, -1)
      .map(
        (_, k, all) =>
          all
            .slice(0, k + 1)
            .join(' ')
            .trim()
            .split(/\s+/).length,
      );
    return cuts.slice(0, breaks.length).map((n): [number, number] => [ends[n - 1], ends[n - 1]]);
  },
});
/** espeak-ng reads SSML breaks of the exact length: no stretching needed (null). */
const espeak = (voice: string): Synth => ({
  id: `espeak-${voice.replace('+', '-')}`,
  say: (text, breaks, out) => {
    let k = 0;
    const ssml = text
      .replace(/,\s*\|/g, '|')
      .replace(/\s*\|\s*/g, () => ` <break time="${breaks[k++]}ms"/> `);
    sh('espeak-ng', ['-m', '-v', voice, '-s', '150', '-w', out, `<speak>${ssml}</speak>`]);
    return null;
  },
});

export const DIALOG_VOICES: Synth[] = [
  flite('kal16'),
  espeak('en-us'),
  festival('cmu_us_slt_arctic_hts', 'slt-hts'),
  flite('slt'),
  flite('rms'),
  espeak('en-gb+f3'),
  festival('kal_diphone', 'kal'),
  flite('awb'),
];

function pcmOf(file: string, effects: string[] = []): Buffer {
  return execFileSync('sox', ['-R', file, '-t', 's16', '-r', String(RATE), '-c', '1', '-', ...effects], {
    maxBuffer: 1 << 28,
  });
}

const zeros = (s: number) => Buffer.alloc(Math.round(s * RATE) * 2);

/** First and last sample above -50 dBFS (bytes). */
function speechBounds(pcm: Buffer): [number, number] {
  const thr = 32768 * 10 ** (-50 / 20);
  let a = 0;
  let b = pcm.length / 2 - 1;
  while (a < b && Math.abs(pcm.readInt16LE(a * 2)) < thr) a++;
  while (b > a && Math.abs(pcm.readInt16LE(b * 2)) < thr) b--;
  return [a * 2, (b + 1) * 2];
}

interface Turn {
  text: string;
  pcm: Buffer;
  /** Pauses inside it: [start, end] seconds from its first sample. */
  pauses: [number, number][];
}

/** One turn: synthesized, pauses stretched to their lengths, tempo applied to the speech only. */
function turn(tmp: string, voice: Synth, line: string, lengths: number[], tempo: number): Turn {
  const bars = (line.match(/\|/g) ?? []).length;
  const wav = path.join(tmp, 'say.wav');
  // flite and festival pause at commas: the `|` become commas, the text's own commas are dropped.
  const said = voice.say(
    voice.id.startsWith('espeak') ? line : line.replace(/,/g, '').replace(/\s*\|\s*/g, ', '),
    lengths.map((s) => Math.round(s * 1000 * tempo)),
    wav,
    tmp,
  );
  const tempoFx = tempo === 1 ? [] : ['tempo', '-s', String(tempo)];
  const text = line
    .replace(/[|,.?]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  if (said === null || bars === 0) {
    const pcm = pcmOf(wav, tempoFx);
    const [a, b] = speechBounds(pcm);
    const out = pcm.subarray(a, b);
    return { text, pcm: out, pauses: silences(out, bars) };
  }
  if (said.length !== bars)
    throw new Error(`${voice.id}: ${said.length} pauses for ${bars} in "${line}" (rewrite the line)`);
  const raw = pcmOf(wav);
  const parts: Buffer[] = [];
  let from = 0;
  said.forEach(([s, e], i) => {
    const mid = Math.round(((s + e) / 2) * RATE) * 2;
    // The synthesizer's own pause counts toward the length.
    parts.push(
      tempoAll(tmp, raw.subarray(from, mid), tempoFx),
      zeros(Math.max(0, lengths[i] - (e - s) / tempo)),
    );
    from = mid;
  });
  parts.push(tempoAll(tmp, raw.subarray(from), tempoFx));
  const pcm = Buffer.concat(parts);
  const [a, b] = speechBounds(pcm);
  const out = pcm.subarray(a, b);
  return { text, pcm: out, pauses: silences(out, bars) };
}

function tempoAll(tmp: string, pcm: Buffer, fx: string[]): Buffer {
  if (fx.length === 0) return pcm;
  const f = path.join(tmp, 'piece.raw');
  fs.writeFileSync(f, pcm);
  return execFileSync('sox', ['-R', '-t', 's16', '-r', String(RATE), '-c', '1', f, '-t', 's16', '-', ...fx]);
}

/** The `n` longest stretches below -45 dBFS (10 ms frames) inside a turn: its pauses, in order. */
function silences(pcm: Buffer, n: number): [number, number][] {
  const hop = RATE / 100;
  const runs: [number, number][] = [];
  let start = -1;
  const frames = Math.floor(pcm.length / 2 / hop);
  for (let f = 0; f <= frames; f++) {
    let e = 0;
    for (let i = 0; f < frames && i < hop; i++) e += pcm.readInt16LE((f * hop + i) * 2) ** 2;
    const quiet = f < frames && Math.sqrt(e / hop) < 32768 * 10 ** (-45 / 20);
    if (quiet && start < 0) start = f;
    if (!quiet && start >= 0) {
      runs.push([start / 100, f / 100]);
      start = -1;
    }
  }
  return runs
    .sort((x, y) => y[1] - y[0] - (x[1] - x[0]))
    .slice(0, n)
    .sort((x, y) => x[0] - y[0]);
}

function condition(tmp: string, pcm: Buffer, c: Condition, seed: number): Buffer {
  const f = path.join(tmp, 'clip.raw');
  fs.writeFileSync(f, pcm);
  const src = ['-t', 's16', '-r', String(RATE), '-c', '1', f];
  const dst = ['-t', 's16', '-r', String(RATE), '-c', '1', '-'];
  const run = (args: string[]) => execFileSync('sox', ['-R', ...args], { maxBuffer: 1 << 28 });
  if (c === 'phone') return run([...src, ...dst, 'sinc', '300-3400', 'rate', '8000', 'rate', String(RATE)]);
  if (c === 'fast-reverb') return run([...src, ...dst, 'gain', '-3', 'reverb', '35', '50', '60']);
  if (c === 'clean') return pcm;
  const noise = path.join(tmp, 'noise.raw');
  const seconds = pcm.length / 2 / RATE;
  fs.writeFileSync(
    noise,
    run(['-n', ...dst, 'synth', seconds.toFixed(4), 'pinknoise', 'gain', '-n', String(-42 - (seed % 3) * 3)]),
  );
  return run(['-m', ...src, '-t', 's16', '-r', String(RATE), '-c', '1', noise, ...dst]);
}

function main(dir: string, source: string, clips: number): void {
  const lines = fs.readFileSync(source, 'utf8').trim().split('\n');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dialog-'));
  fs.rmSync(path.join(dir, 'dialog'), { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'dialog'), { recursive: true });
  const rows = ['file\tvoice\tcondition\tturns\tspeech\tpauses'];
  let bar = 0;
  for (let n = 0; n < clips; n++) {
    const voice = DIALOG_VOICES[n % DIALOG_VOICES.length];
    const cond = CONDITIONS[(n + Math.floor(n / DIALOG_VOICES.length)) % CONDITIONS.length];
    const tempo = cond === 'fast-reverb' ? 1.15 : 1;
    const picked = Array.from({ length: 4 }, (_, k) => lines[(n * 4 + k * 9) % lines.length]);
    const turns = picked.map((line) => {
      const lengths = (line.match(/\|/g) ?? []).map(() => INNER[bar++ % INNER.length]);
      return turn(tmp, voice, line, lengths, tempo);
    });
    const parts: Buffer[] = [zeros(0.5)];
    let at = 0.5;
    const spans: string[] = [];
    const pauses: string[] = [];
    turns.forEach((t, i) => {
      if (i > 0) {
        parts.push(zeros(TURN_GAP_S));
        at += TURN_GAP_S;
      }
      const len = t.pcm.length / 2 / RATE;
      spans.push(`${at.toFixed(3)}-${(at + len).toFixed(3)}`);
      pauses.push(t.pauses.map(([s, e]) => `${(at + s).toFixed(3)}-${(at + e).toFixed(3)}`).join(','));
      parts.push(t.pcm);
      at += len;
    });
    parts.push(zeros(1.5));
    const pcm = condition(tmp, Buffer.concat(parts), cond, n);
    const name = `dialog/${String(n).padStart(2, '0')}-${voice.id}-${cond}.flac`;
    const raw = path.join(tmp, 'out.raw');
    fs.writeFileSync(raw, pcm);
    sh('sox', ['-R', '-t', 's16', '-r', String(RATE), '-c', '1', raw, path.join(dir, name)]);
    rows.push(
      [name, voice.id, cond, turns.map((t) => t.text).join(' / '), spans.join(' '), pauses.join(';')].join(
        '\t',
      ),
    );
  }
  fs.writeFileSync(path.join(dir, 'dialog.tsv'), rows.join('\n') + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`dialog corpus: ${clips} clips in ${dir}`);
}

const heldOut = process.argv.find((a) => a.startsWith('--held-out='))?.slice(11);
if (heldOut) main(heldOut, path.join(HERE, 'dialog-heldout.txt'), 16);
else main(HERE, path.join(HERE, 'dialog.txt'), 24);
