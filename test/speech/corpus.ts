/**
 * The generated evaluation corpus (test/audio/corpus, made by its
 * generate.ts): its rows, their audio as 16 kHz PCM, and the checks of
 * reported times against the speech intervals the generator recorded.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { AUDIO_DIR } from './helpers.js';

export const CORPUS_DIR = path.join(AUDIO_DIR, 'corpus');

export interface CorpusClip {
  file: string;
  path: string;
  voice: string;
  leadIn: number;
  pause: string;
  tempo: number;
  noiseDb: number | null;
  reference: string;
  /** [start, end] seconds of each spoken sentence, in order. */
  speech: [number, number][];
  /** The reference text of each sentence (same order as `speech`). */
  sentences: string[];
  long: boolean;
}

/** `dir`: another corpus made by generate.ts (`--held-out=DIR`). */
export function loadCorpus(kind: 'short' | 'long' | 'all' = 'short', dir = CORPUS_DIR): CorpusClip[] {
  const sentencesOf = sentenceSplitter(dir);
  const rows = fs.readFileSync(path.join(dir, 'corpus.tsv'), 'utf8').trim().split('\n').slice(1);
  return rows
    .map((row) => {
      const [file, voice, leadIn, pause, tempo, noise, reference, speech] = row.split('\t');
      return {
        file,
        path: path.join(dir, file),
        voice,
        leadIn: Number(leadIn),
        pause,
        tempo: Number(tempo),
        noiseDb: noise === '' ? null : Number(noise),
        reference,
        speech: speech.split(' ').map((s) => s.split('-').map(Number) as [number, number]),
        sentences: sentencesOf(reference),
        long: file.startsWith('long/'),
      };
    })
    .filter((c) => kind === 'all' || (kind === 'long') === c.long);
}

/** Splits a clip's reference back into the sentences of sentences.txt it was made of. */
function sentenceSplitter(dir: string): (reference: string) => string[] {
  const known = fs.readFileSync(path.join(dir, 'sentences.txt'), 'utf8').trim().split('\n');
  return (reference) => {
    const out: string[] = [];
    let rest = reference;
    while (rest) {
      const s = known
        .filter((k) => rest === k || rest.startsWith(k + ' '))
        .sort((a, b) => b.length - a.length)[0];
      if (!s) throw new Error(`corpus: no sentence starts "${rest.slice(0, 40)}"`);
      out.push(s);
      rest = rest.slice(s.length).trimStart();
    }
    return out;
  };
}

/** The clip's audio as 16 kHz mono PCM16 (ffmpeg), optionally at another rate for upload tests. */
export function corpusPcm(clip: Pick<CorpusClip, 'path'>, rate = 16_000): Buffer {
  return execFileSync(
    'ffmpeg',
    ['-nostdin', '-loglevel', 'error', '-i', clip.path, '-f', 's16le', '-ac', '1', '-ar', String(rate), '-'],
    { maxBuffer: 1 << 30 },
  );
}

/** A WAV file of the clip (16-bit mono at `rate`). */
export function corpusWav(clip: CorpusClip, rate = 16_000): Buffer {
  const pcm = corpusPcm(clip, rate);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0);
  h.writeUInt32LE(36 + pcm.length, 4);
  h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(rate * 2, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36);
  h.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([h, pcm]);
}

export interface TimedWord {
  word: string;
  start: number;
  end: number;
}

/** How far [start, end] lies outside the nearest speech interval (0 when inside). */
export function outsideSpeech(speech: [number, number][], start: number, end: number): number {
  let best = Infinity;
  for (const [a, b] of speech) {
    const d = Math.max(0, a - start) + Math.max(0, end - b);
    best = Math.min(best, d);
  }
  return best;
}

export interface TimingReport {
  /** Words whose span lies more than `tolerance` outside every speech interval. */
  outside: { word: string; start: number; end: number; by: number }[];
  /**
   * |reported start - true start| of each sentence whose first word was
   * recognised as the first word of the first piece starting inside it (seconds).
   */
  startErrors: number[];
}

/** Checks reported word times against the clip's speech intervals. */
export function timing(clip: CorpusClip, words: TimedWord[], tolerance = 0.15): TimingReport {
  const outside: TimingReport['outside'] = [];
  for (const w of words) {
    const by = outsideSpeech(clip.speech, w.start, w.end);
    if (by > tolerance) outside.push({ ...w, by });
  }
  const startErrors: number[] = [];
  clip.speech.forEach(([a, b], i) => {
    const first = clip.sentences[i].split(' ')[0];
    // The first reported word whose middle lies in this sentence's interval.
    const w = words.find((x) => (x.start + x.end) / 2 >= a - 0.15 && (x.start + x.end) / 2 <= b + 0.15);
    if (w && w.word.toLowerCase() === first) startErrors.push(Math.abs(w.start - a));
  });
  return { outside, startErrors };
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}
