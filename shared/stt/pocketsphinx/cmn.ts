/**
 * Cepstral mean normalisation for the streaming form, computed here rather
 * than by PocketSphinx (measurements in docs/decisions.md, issue 13).
 *
 * PocketSphinx 0.8 normalises either over the whole utterance (`-cmn batch`,
 * only when the utterance arrives in one call) or with a live estimate that
 * starts from the model's prior and is updated only at the end of each
 * utterance. The prior is far from real recordings (c0 41 against 50-59 on
 * the test clips), so fed piecewise, a session's first utterance is
 * normalised wrongly (jfk.wav: 86% WER instead of 23%), and the decoder's
 * state leaks from one session into the next.
 *
 * Here the estimate belongs to the session: its first `bootstrapFrames`
 * frames set the first estimate, then the mean moves with every frame (an
 * exponentially weighted window of `window` frames). Until then a frame
 * waits `lookaheadFrames` and is searched with a provisional estimate (the
 * session's frames so far, with the model's prior); when the estimate moves
 * more than `researchDistance` from the one in use, the utterance is searched
 * again from its start with the newer one (at most each time it has grown
 * `researchGrowth` times), so a session's first utterance is searched while
 * it is spoken, at about the accuracy of waiting for the whole bootstrap.
 * When the bootstrap or the utterance ends, the frames still waiting get the
 * settled estimate; the frames already searched are searched again only
 * past `settleDistance` (default: never). That search would be all the
 * utterance's frames at once, just when its words are wanted: on 96 clips
 * it added up to 450 ms to a first sentence's final and no word
 * (docs/decisions/speech.md, "No search from the start when the estimate
 * settles"). The estimate travels
 * with the session from decoder to decoder, so the text depends only on the
 * session's audio, never on how it was chunked or which pooled decoder took it.
 */

/** Coefficients per frame (`-ceplen`, 13 for the en-us model). */
export const CEPSTRUM_LENGTH = 13;

/** The en-us model's `-cmninit` (feat.params): weighs in while the session has few frames. */
export const EN_US_CMN_PRIOR = [
  41.0, -5.29, -0.12, 5.09, 2.48, -4.07, -1.37, -1.78, -5.08, -2.05, -6.45, -1.42, 1.17,
];

import { DEFAULT_CMN, type CmnSettings } from '../../config/speech.js';
export { DEFAULT_CMN, type CmnSettings };

/** A session's running estimate; plain data so it can cross to a worker thread and back. */
export interface CmnEstimate {
  sum: number[];
  frames: number;
  /** The bootstrap is done: frames are normalised as they arrive. */
  ready: boolean;
}

export function initialCmn(): CmnEstimate {
  return { sum: new Array<number>(CEPSTRUM_LENGTH).fill(0), frames: 0, ready: false };
}

/** Frames of (near) digital silence carry no channel information (PocketSphinx skips them too). */
const counts = (frames: Float32Array, off: number) => frames[off] >= 0;

/** Normalised frames for the search; `restart`: the utterance's search starts over with these frames. */
export interface CmnOutput {
  restart: boolean;
  frames: Float32Array[];
}

/** What the normaliser did to the utterance (benchmarks). */
export interface CmnTrace {
  /** Frames searched with a provisional estimate. */
  provisional: number;
  /** Largest distance of a provisional estimate from the final one (0 if none). */
  moved: number;
  /** Times the utterance was searched again from its start. */
  restarts: number;
  /** Frames handed to the search at the end of the utterance (its tail). */
  tail: number;
}

const distance = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let d = 0;
  for (let j = 0; j < CEPSTRUM_LENGTH; j++) d += (a[j] - b[j]) ** 2;
  return Math.sqrt(d);
};

/**
 * Normalises one utterance's cepstra for the search, frame by frame, with
 * the session's estimate; the result is the same however the frames are split
 * into calls.
 */
export class CmnNormaliser {
  private readonly s: Required<CmnSettings>;
  /** Bootstrap: the utterance's raw frames so far (kept for a search from the start). */
  private raw: Float32Array[] = [];
  /** Bootstrap: how many of `raw` were searched (with the provisional estimate `used`). */
  private searched = 0;
  private used: Float64Array | undefined;
  /** Bootstrap: length of `raw` when the search last started from the utterance's start. */
  private searchStart = 0;
  readonly trace: CmnTrace = { provisional: 0, moved: 0, restarts: 0, tail: 0 };

  constructor(
    readonly estimate: CmnEstimate,
    s: CmnSettings = DEFAULT_CMN,
    private readonly prior: readonly number[] = EN_US_CMN_PRIOR,
  ) {
    this.s = { ...DEFAULT_CMN, ...s };
  }

  /** Frames ready for the search (possibly none while the bootstrap waits). */
  push(frames: Float32Array): CmnOutput {
    const est = this.estimate;
    if (est.ready) {
      this.running(frames);
      return { restart: false, frames: [frames] };
    }
    // Frame by frame, so that the bootstrap ends at the same frame however the audio was chunked.
    const L = CEPSTRUM_LENGTH;
    const out: CmnOutput = { restart: false, frames: [] };
    let off = 0;
    while (off + L <= frames.length && !est.ready) {
      const f = frames.slice(off, off + L);
      off += L;
      if (counts(f, 0)) {
        for (let j = 0; j < L; j++) est.sum[j] += f[j];
        est.frames++;
      }
      this.raw.push(f);
      if (est.frames >= Math.max(1, this.s.bootstrapFrames)) {
        est.ready = true;
        this.settle(
          est.sum.map((x) => x / est.frames),
          out,
        );
      } else this.provisional(out);
    }
    if (off < frames.length) {
      const rest = frames.subarray(off);
      this.running(rest);
      out.frames.push(rest);
    }
    return out;
  }

  /** The utterance ended: whatever waits for the bootstrap is normalised with what is known. */
  flush(): CmnOutput {
    const out: CmnOutput = { restart: false, frames: [] };
    if (this.raw.length > 0) this.settle(Array.from(this.provisionalMean()), out);
    this.trace.tail += out.frames.reduce((n, f) => n + f.length / CEPSTRUM_LENGTH, 0);
    return out;
  }

  /**
   * The search is wanted up to the last frame now (a pause is being judged on
   * the words so far): during the bootstrap, the frames still waiting their
   * lookahead go to the search at once, as `provisional` would send them.
   */
  catchUp(): CmnOutput {
    const out: CmnOutput = { restart: false, frames: [] };
    if (!this.estimate.ready && this.raw.length > this.searched) this.provisional(out, 0);
    return out;
  }

  /**
   * Bootstrap: frames that waited `lookaheadFrames` go to the search with the
   * provisional estimate; when the session's estimate has moved too far from
   * it, the search starts over with the newer one.
   */
  private provisional(out: CmnOutput, lookahead = Math.max(0, this.s.lookaheadFrames)): void {
    const waiting = this.raw.length - this.searched;
    if (waiting <= lookahead) return;
    const mean = this.provisionalMean();
    if (!this.used) {
      this.used = mean;
      this.searchStart = this.raw.length;
    } else if (
      distance(this.used, mean) > this.s.researchDistance &&
      this.raw.length >= this.searchStart * this.s.researchGrowth
    ) {
      this.restart(out);
      this.used = mean;
      this.searchStart = this.raw.length;
    }
    const upTo = this.raw.length - lookahead;
    for (; this.searched < upTo; this.searched++)
      out.frames.push(this.normalised(this.raw[this.searched], this.used));
  }

  private restart(out: CmnOutput): void {
    out.restart = true;
    out.frames = [];
    this.searched = 0;
    this.trace.restarts++;
  }

  private normalised(f: Float32Array, mean: ArrayLike<number>): Float32Array {
    const g = f.slice();
    for (let j = 0; j < CEPSTRUM_LENGTH; j++) g[j] -= mean[j];
    this.trace.provisional++;
    return g;
  }

  private provisionalMean(): Float64Array {
    const est = this.estimate;
    const w = this.s.priorFrames;
    const mean = new Float64Array(CEPSTRUM_LENGTH);
    for (let j = 0; j < CEPSTRUM_LENGTH; j++) mean[j] = (est.sum[j] + this.prior[j] * w) / (est.frames + w);
    return mean;
  }

  /**
   * The estimate for the utterance's waiting frames is final: they are
   * normalised with it, and if the frames already searched used an estimate
   * too far from it, the search starts over from the utterance's first frame.
   */
  private settle(mean: number[], out: CmnOutput): void {
    if (this.used) {
      const moved = distance(this.used, mean);
      this.trace.moved = Math.max(this.trace.moved, moved);
      if (moved > this.s.settleDistance) this.restart(out);
    }
    const L = CEPSTRUM_LENGTH;
    for (let i = this.searched; i < this.raw.length; i++) {
      const f = this.raw[i];
      for (let j = 0; j < L; j++) f[j] -= mean[j];
      out.frames.push(f);
    }
    this.raw = [];
    this.used = undefined;
    this.searched = 0;
  }

  private running(frames: Float32Array): void {
    const L = CEPSTRUM_LENGTH;
    const est = this.estimate;
    const sum = est.sum;
    for (let off = 0; off + L <= frames.length; off += L) {
      if (counts(frames, off)) {
        for (let j = 0; j < L; j++) sum[j] += frames[off + j];
        est.frames++;
      }
      const n = est.frames;
      for (let j = 0; j < L; j++) frames[off + j] -= sum[j] / n;
      if (n > this.s.window) {
        const k = this.s.window / n;
        for (let j = 0; j < L; j++) sum[j] *= k;
        est.frames = this.s.window;
      }
    }
  }
}
