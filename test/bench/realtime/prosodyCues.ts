/**
 * How well the voice alone tells a sentence end from a pause inside a
 * sentence on the turn corpus (issue 38; test/audio/corpus/dialog.ts), with
 * a pitch tracker independent of the service's (YIN, 40 ms windows every
 * 10 ms, 60-400 Hz), at the corpus's own pause and end times: for each
 * phrase (from a turn's start or a made pause's end to the next pause or
 * the turn's end), the pitch slope over its last 300 ms of voiced frames,
 * the pitch of its last 80 ms against the phrase's median and against its
 * 10th percentile, and the energy of its last 200 ms against the phrase's
 * median. Prints each cue's AUC (the chance that a sentence end reads lower
 * than a pause inside a sentence; 0.5: no separation), overall and per
 * synthesizer. The service's own cues at judged pauses come from
 * `turns.ts --cues=FILE`.
 *
 *   npx tsx test/bench/realtime/prosodyCues.ts [--corpus=DIR]
 */
import fs from 'node:fs';
import path from 'node:path';
import { CORPUS_DIR, corpusPcm } from '../../speech/corpus.js';

const DIR = process.argv.find((a) => a.startsWith('--corpus='))?.split('=')[1] ?? CORPUS_DIR;
const RATE = 16_000;
const WINDOW = 640;
const HOP = 160;
const MIN_LAG = RATE / 400;
const MAX_LAG = Math.round(RATE / 60);
const THRESHOLD = 0.15;

/** The file as samples in [-1, 1). */
function samplesOf(file: string): Float32Array {
  const raw = corpusPcm({ path: file });
  return Float32Array.from(new Int16Array(raw.buffer, raw.byteOffset, raw.length >> 1), (v) => v / 32768);
}

/** Per 10 ms frame: F0 in Hz (0 when unvoiced) and level in dB. */
function track(x: Float32Array): { f0: number[]; db: number[] } {
  const f0: number[] = [];
  const db: number[] = [];
  const d = new Float64Array(MAX_LAG + 1);
  const cm = new Float64Array(MAX_LAG + 1);
  for (let s = 0; s + WINDOW + MAX_LAG < x.length; s += HOP) {
    let e = 0;
    for (let i = 0; i < WINDOW; i++) e += x[s + i] * x[s + i];
    db.push(10 * Math.log10(e / WINDOW + 1e-18));
    for (let t = 1; t <= MAX_LAG; t++) {
      let sum = 0;
      for (let i = 0; i < WINDOW; i++) {
        const v = x[s + i] - x[s + i + t];
        sum += v * v;
      }
      d[t] = sum;
    }
    // Cumulative mean normalised difference; the first dip under the threshold, followed to its minimum.
    let running = 0;
    for (let t = 1; t <= MAX_LAG; t++) {
      running += d[t];
      cm[t] = (d[t] * t) / (running || 1);
    }
    let lag = 0;
    for (let t = MIN_LAG; t < MAX_LAG; t++) {
      if (cm[t] >= THRESHOLD) continue;
      lag = t;
      while (lag + 1 < MAX_LAG && cm[lag + 1] < cm[lag]) lag++;
      break;
    }
    f0.push(lag ? RATE / lag : 0);
  }
  return { f0, db };
}

const semitones = (hz: number) => 12 * Math.log2(hz / 100);
const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const quantile = (v: number[], q: number) => [...v].sort((a, b) => a - b)[Math.floor(q * (v.length - 1))];

function slope(t: number[], y: number[]): number {
  const n = t.length;
  const mt = t.reduce((a, b) => a + b, 0) / n;
  const my = y.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (t[i] - mt) * (y[i] - my);
    den += (t[i] - mt) ** 2;
  }
  return den ? num / den : 0;
}

type Cues = Record<string, number>;
const events: { file: string; end: boolean; cues: Cues }[] = [];
const rows = fs.readFileSync(path.join(DIR, 'dialog.tsv'), 'utf8').trim().split('\n').slice(1);
for (const row of rows) {
  const [file, , , , speech, pauses] = row.split('\t');
  const { f0, db } = track(samplesOf(path.join(DIR, file)));
  const inner = (pauses ?? '').split(';');
  speech.split(' ').forEach((span, i) => {
    const [a, b] = span.split('-').map(Number);
    const made = inner[i] ? inner[i].split(',').map((p) => p.split('-').map(Number)) : [];
    const starts = [a, ...made.map((p) => p[1])];
    const ends = [...made.map((p) => p[0]), b];
    starts.forEach((s, j) => {
      // Frames wholly before the phrase's end.
      const from = Math.round(s * 100);
      const to = Math.round(ends[j] * 100) - 3;
      const t: number[] = [];
      const st: number[] = [];
      for (let k = from; k < to && k < f0.length; k++)
        if (f0[k] > 0) (t.push(k / 100), st.push(semitones(f0[k])));
      if (st.length < 8) return;
      const last = t.at(-1)!;
      const tail = t.map((v, k) => [v, st[k]]).filter(([v]) => v >= last - 0.3);
      const levels = db.slice(from, to);
      events.push({
        file,
        end: j === starts.length - 1,
        cues: {
          'pitch slope, last 300 ms':
            tail.length >= 4
              ? slope(
                  tail.map((p) => p[0]),
                  tail.map((p) => p[1]),
                )
              : 0,
          'last 80 ms vs phrase median': median(st.slice(-8)) - median(st),
          'last 80 ms vs phrase 10th pct': median(st.slice(-8)) - quantile(st, 0.1),
          'level, last 200 ms vs median': median(levels.slice(-20)) - median(levels),
        },
      });
    });
  });
}

/** P(an end reads lower than a pause inside a sentence). */
function auc(ends: number[], inside: number[]): number {
  let wins = 0;
  for (const e of ends) for (const m of inside) wins += e < m ? 1 : e === m ? 0.5 : 0;
  return wins / (ends.length * inside.length);
}

const names = Object.keys(events[0].cues);
const ends = events.filter((e) => e.end).length;
console.log(`turn corpus ${DIR}: ${ends} sentence ends, ${events.length - ends} pauses inside sentences`);
console.log(`| cue | all | flite | espeak-ng | festival |\n|---|---|---|---|---|`);
for (const name of names) {
  const of = (filter: (f: string) => boolean) => {
    const es = events.filter((e) => filter(e.file));
    return auc(
      es.filter((e) => e.end).map((e) => e.cues[name]),
      es.filter((e) => !e.end).map((e) => e.cues[name]),
    ).toFixed(2);
  };
  const by = (s: string) => of((f) => f.includes(`-${s}`));
  console.log(`| ${name} | ${of(() => true)} | ${by('flite')} | ${by('espeak')} | ${by('festival')} |`);
}
