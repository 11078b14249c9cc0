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
 * Here the estimate belongs to the session: the first `bootstrapFrames`
 * frames of the session's audio wait (cheap: only the front end has run)
 * until their own mean is known, then the mean moves with every frame (an
 * exponentially weighted window of `window` frames). The estimate travels
 * with the session from decoder to decoder, so the text depends only on the
 * session's audio, never on how it was chunked or which pooled decoder took it.
 */

/** Coefficients per frame (`-ceplen`, 13 for the en-us model). */
export const CEPSTRUM_LENGTH = 13;

/** The en-us model's `-cmninit` (feat.params): used only when an utterance ends before the bootstrap. */
export const EN_US_CMN_PRIOR = [
  41.0, -5.29, -0.12, 5.09, 2.48, -4.07, -1.37, -1.78, -5.08, -2.05, -6.45, -1.42, 1.17,
];

export interface CmnSettings {
  /** Frames (10 ms) of the session's own audio that set the first estimate. */
  bootstrapFrames: number;
  /** Weight of the model's prior while fewer frames have been seen. */
  priorFrames: number;
  /** Frames the running mean remembers (older frames decay). */
  window: number;
}

export const DEFAULT_CMN: CmnSettings = { bootstrapFrames: 300, priorFrames: 10, window: 3000 };

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

/**
 * Normalises one utterance's cepstra for the search, frame by frame, with
 * the session's estimate; the result is the same however the frames are split
 * into calls.
 */
export class CmnNormaliser {
  private held: Float32Array[] = [];

  constructor(
    readonly estimate: CmnEstimate,
    private readonly s: CmnSettings = DEFAULT_CMN,
    private readonly prior: readonly number[] = EN_US_CMN_PRIOR,
  ) {}

  /** Frames ready for the search (possibly none while the bootstrap waits). */
  push(frames: Float32Array): Float32Array[] {
    const est = this.estimate;
    if (est.ready) {
      this.running(frames);
      return [frames];
    }
    // Frame by frame, so that the bootstrap ends at the same frame however the audio was chunked.
    const L = CEPSTRUM_LENGTH;
    let off = 0;
    while (off + L <= frames.length && est.frames < this.s.bootstrapFrames) {
      if (counts(frames, off)) {
        for (let j = 0; j < L; j++) est.sum[j] += frames[off + j];
        est.frames++;
      }
      off += L;
    }
    this.held.push(frames.subarray(0, off));
    if (est.frames < this.s.bootstrapFrames) return [];
    est.ready = true;
    const out = this.release(est.sum.map((x) => x / est.frames));
    if (off < frames.length) {
      const rest = frames.subarray(off);
      this.running(rest);
      out.push(rest);
    }
    return out;
  }

  /** The utterance ended: whatever waits for the bootstrap is normalised with what is known. */
  flush(): Float32Array[] {
    if (this.held.length === 0) return [];
    const est = this.estimate;
    const w = this.s.priorFrames;
    return this.release(est.sum.map((x, j) => (x + this.prior[j] * w) / (est.frames + w)));
  }

  private release(mean: number[]): Float32Array[] {
    const out = this.held;
    this.held = [];
    const L = CEPSTRUM_LENGTH;
    for (const f of out)
      for (let off = 0; off + L <= f.length; off += L) for (let j = 0; j < L; j++) f[off + j] -= mean[j];
    return out;
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
