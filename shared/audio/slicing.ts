/**
 * Time slicing that does not cut words. The audio's short-time energy (10 ms
 * frames) is computed once; each ideal boundary (the duration split into
 * equal pieces of about segment_seconds) then moves to the quietest point
 * within a search window around it, where "quiet" means the loudest frame of
 * the surrounding 300 ms is low, i.e. the cut sits inside a pause, not in a
 * short dip between two syllables. Ties go to the point nearest the ideal
 * boundary so chunks stay close to the requested length.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';

import { PCM_SAMPLE_RATE as SAMPLE_RATE } from './pcm.js';
export { SAMPLE_RATE };
export const FRAME_SAMPLES = 160; // 10 ms
export const FRAME_SECONDS = FRAME_SAMPLES / SAMPLE_RATE;

export interface Slice {
  index: number;
  start: number; // seconds
  end: number; // seconds
}

export interface SlicePlan {
  segment_seconds: number;
  duration: number;
  slices: Slice[];
  /** Per boundary: ideal time, chosen cut, and the level there (dBFS). */
  cuts: { target: number; cut: number; level_db: number }[];
}

const FLOOR_DB = -100;

function frameDb(sumSquares: number, n: number): number {
  if (n === 0 || sumSquares === 0) return FLOOR_DB;
  const rms = Math.sqrt(sumSquares / n) / 32768;
  return Math.max(FLOOR_DB, 20 * Math.log10(rms));
}

/** Energy per 10 ms frame (dBFS) of PCM16LE mono samples. */
export function energyEnvelope(pcm: Buffer): Float32Array {
  const samples = Math.floor(pcm.length / 2);
  const frames = Math.ceil(samples / FRAME_SAMPLES);
  const out = new Float32Array(frames);
  for (let f = 0; f < frames; f++) {
    let sum = 0;
    const end = Math.min(samples, (f + 1) * FRAME_SAMPLES);
    for (let i = f * FRAME_SAMPLES; i < end; i++) {
      const s = pcm.readInt16LE(i * 2);
      sum += s * s;
    }
    out[f] = frameDb(sum, end - f * FRAME_SAMPLES);
  }
  return out;
}

/**
 * energyEnvelope built piece by piece, as PCM arrives (decoder output, file
 * reads): pieces may split a sample or a frame anywhere.
 */
export class EnvelopeBuilder {
  private values = new Float32Array(1024);
  private frames = 0;
  private sum = 0;
  private n = 0;
  private carry: Buffer | null = null;
  samples = 0;

  push(raw: Buffer): void {
    let chunk = raw;
    if (this.carry) {
      chunk = Buffer.concat([this.carry, chunk]);
      this.carry = null;
    }
    const usable = chunk.length - (chunk.length % 2);
    // Copied: the caller may reuse its buffer for the next piece.
    if (usable < chunk.length) this.carry = Buffer.from(chunk.subarray(usable));
    let { sum, n } = this;
    for (let i = 0; i < usable; i += 2) {
      const s = chunk.readInt16LE(i);
      sum += s * s;
      n++;
      if (n === FRAME_SAMPLES) {
        this.add(frameDb(sum, n));
        sum = 0;
        n = 0;
      }
    }
    this.sum = sum;
    this.n = n;
    this.samples += usable / 2;
  }

  private add(db: number): void {
    if (this.frames === this.values.length) {
      const grown = new Float32Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.frames++] = db;
  }

  finish(): Float32Array {
    if (this.n > 0) this.add(frameDb(this.sum, this.n));
    this.n = 0;
    return this.values.slice(0, this.frames);
  }
}

/**
 * Same as energyEnvelope, streaming over a raw PCM file (long audio never
 * sits in memory); also the sha256 of the samples, which ties checkpoints to
 * the audio they were made from.
 */
export async function energyEnvelopeOfFile(
  file: string,
): Promise<{ envelope: Float32Array; samples: number; sha256: string }> {
  const hash = createHash('sha256');
  const env = new EnvelopeBuilder();
  for await (const raw of createReadStream(file, { highWaterMark: 1 << 20 })) {
    hash.update(raw as Buffer);
    env.push(raw as Buffer);
  }
  return { envelope: env.finish(), samples: env.samples, sha256: hash.digest('hex') };
}

/** Loudest frame within ±half frames of each frame (a sliding maximum). */
function neighbourhoodMax(env: Float32Array, half: number, from: number, to: number): Float32Array {
  const out = new Float32Array(to - from);
  for (let f = from; f < to; f++) {
    let m = FLOOR_DB;
    const a = Math.max(0, f - half);
    const b = Math.min(env.length - 1, f + half);
    for (let i = a; i <= b; i++) if (env[i] > m) m = env[i];
    out[f - from] = m;
  }
  return out;
}

export interface SliceOptions {
  segmentSeconds: number;
  /** Cap on how far a cut may move from its ideal boundary (seconds). */
  maxSearchSeconds: number;
  /** Width of the pause a cut must sit in (seconds). */
  pauseSeconds?: number;
}

/** The most pieces one plan may have: a bound on the cut loop whatever the inputs. */
export const MAX_SLICES = 100_000;

export function planSlices(envelope: Float32Array, duration: number, opts: SliceOptions): SlicePlan {
  const S = opts.segmentSeconds;
  // A stored workflow from before its field was bounded (null, Infinity) must fail, not loop forever.
  if (!(S > 0 && Number.isFinite(S)) || !(duration >= 0 && Number.isFinite(duration)))
    throw new RangeError(`cannot slice ${duration} s into pieces of ${S} s`);
  if (duration / S > MAX_SLICES)
    throw new RangeError(`${duration} s in pieces of ${S} s is more than ${MAX_SLICES} pieces`);
  const count = Math.max(1, Math.round(duration / S));
  const piece = duration / count;
  const search = Math.min(opts.maxSearchSeconds, piece * 0.25);
  const half = Math.max(1, Math.round((opts.pauseSeconds ?? 0.3) / FRAME_SECONDS / 2));
  const cuts: SlicePlan['cuts'] = [];
  let prev = 0;
  for (let k = 1; k < count; k++) {
    const target = k * piece;
    // Never let a chunk shrink below half the ideal length.
    const lo = Math.max(prev + piece * 0.5, target - search);
    const hi = Math.min(duration - piece * 0.5, target + search);
    let cut = target;
    let level = envelope[Math.min(envelope.length - 1, Math.floor(target / FRAME_SECONDS))] ?? FLOOR_DB;
    if (hi > lo) {
      const from = Math.max(0, Math.floor(lo / FRAME_SECONDS));
      const to = Math.min(envelope.length, Math.ceil(hi / FRAME_SECONDS));
      const nb = neighbourhoodMax(envelope, half, from, to);
      let best = Infinity;
      for (let f = from; f < to; f++) {
        const t = (f + 0.5) * FRAME_SECONDS;
        // Up to 3 dB of preference for points near the ideal boundary.
        const score = nb[f - from] + (3 * Math.abs(t - target)) / Math.max(search, FRAME_SECONDS);
        if (score < best) {
          best = score;
          cut = t;
          level = nb[f - from];
        }
      }
    }
    cut = Math.round(cut * 100) / 100;
    cuts.push({ target: Math.round(target * 100) / 100, cut, level_db: Math.round(level * 10) / 10 });
    prev = cut;
  }
  const bounds = [0, ...cuts.map((c) => c.cut), duration];
  const slices: Slice[] = [];
  for (let i = 0; i < bounds.length - 1; i++) slices.push({ index: i, start: bounds[i], end: bounds[i + 1] });
  return { segment_seconds: S, duration, slices, cuts };
}

/** Byte range of a slice inside a PCM16 mono 16 kHz buffer or file. */
export function sliceByteRange(s: Slice): { start: number; end: number } {
  return { start: Math.round(s.start * SAMPLE_RATE) * 2, end: Math.round(s.end * SAMPLE_RATE) * 2 };
}

export interface UtteranceOptions {
  /** A quiet run at least this long separates two utterances (seconds). */
  minPauseSeconds: number;
  /** Longer utterances are cut again at their quietest points (seconds). */
  maxUtteranceSeconds: number;
  /**
   * A pause ends a piece only once the piece is at least this long
   * (seconds; 0 = cut at every pause). Longer pieces give PocketSphinx's
   * per-call normalisation more audio to work from.
   */
  minUtteranceSeconds?: number;
  /**
   * With `sameChannel`: a piece shorter than this goes on through a pause
   * when the phrase after it is the same voice and channel (a steadier
   * normalisation), and ends there when it is not (shared/audio/channel.ts).
   */
  joinUtteranceSeconds?: number;
  sameChannel?: (piece: [number, number], next: [number, number]) => boolean;
}

/**
 * Splits one chunk into utterances at its pauses, for engines that decode
 * best one utterance at a time (PocketSphinx normalises and applies its
 * language model per call). "Quiet" is relative to the chunk itself: below a
 * quarter of the way from its noise floor (10th percentile frame) to its
 * speech level (90th percentile). Each cut sits in the middle of a pause, so
 * every utterance keeps some silence on both sides; stretches with no frame
 * above the threshold are dropped (nothing to transcribe).
 */
export function splitUtterances(envelope: Float32Array, duration: number, opts: UtteranceOptions): Slice[] {
  if (envelope.length === 0) return [];
  const sorted = Float32Array.from(envelope).sort();
  const floor = sorted[Math.floor(sorted.length * 0.1)];
  const speech = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.9))];
  // No contrast (steady noise or steady speech): no pauses to find, only the length cap applies.
  const threshold = speech - floor < 6 ? -Infinity : floor + (speech - floor) * 0.25;
  const minPause = Math.max(1, Math.round(opts.minPauseSeconds / FRAME_SECONDS));
  const minPiece = opts.minUtteranceSeconds ?? 0;
  const joinPiece = opts.sameChannel ? Math.max(minPiece, opts.joinUtteranceSeconds ?? 0) : minPiece;
  // Every pause long enough, then which of them end a piece.
  const pauses: number[] = [];
  let runStart = -1;
  for (let f = 0; f <= envelope.length; f++) {
    const quiet = f < envelope.length && envelope[f] < threshold;
    if (quiet && runStart < 0) runStart = f;
    if (!quiet && runStart >= 0) {
      if (f - runStart >= minPause && runStart > 0 && f < envelope.length)
        pauses.push(((runStart + f) / 2) * FRAME_SECONDS);
      runStart = -1;
    }
  }
  const cuts: number[] = [];
  pauses.forEach((cut, i) => {
    const from = cuts.at(-1) ?? 0;
    if (cut - from < minPiece) return;
    if (cut - from >= joinPiece || !opts.sameChannel!([from, cut], [cut, pauses[i + 1] ?? duration]))
      cuts.push(cut);
  });
  const bounds = [0, ...cuts, duration];
  const out: Slice[] = [];
  for (let i = 0; i < bounds.length - 1; i++) {
    const a = bounds[i];
    const b = bounds[i + 1];
    const fa = Math.floor(a / FRAME_SECONDS);
    const fb = Math.min(envelope.length, Math.ceil(b / FRAME_SECONDS));
    let loud = false;
    for (let f = fa; f < fb && !loud; f++) loud = envelope[f] >= threshold;
    if (!loud) continue;
    if (b - a > opts.maxUtteranceSeconds) {
      const sub = planSlices(envelope.subarray(fa, fb), b - a, {
        segmentSeconds: opts.maxUtteranceSeconds,
        maxSearchSeconds: opts.maxUtteranceSeconds / 4,
      });
      for (const s of sub.slices) out.push({ index: out.length, start: a + s.start, end: a + s.end });
    } else {
      out.push({ index: out.length, start: a, end: b });
    }
  }
  return out;
}
