/**
 * The speech flag of each 32 ms window (segmenter.ts decides what the flags
 * mean for utterances): silero through a classifier from the stream's
 * source, held only while needed, with the cost controls of VAD_TUNING:
 * - while no utterance is open, a window below the energy gate is silence
 *   without asking the model (silent streams cost almost nothing), and the
 *   model is handed back after `releaseAfterMs` of such silence;
 * - speech hold: inside an open utterance, a window well above the noise
 *   floor right after a model "speech" answer counts as speech without the
 *   model, at most `maxSkip` windows in a row;
 * - quiet phrases: while a candidate is open (the model has said speech,
 *   no utterance is announced yet), a window above silero's exit threshold
 *   counts as speech, as it would once speech had started. A quiet phrase
 *   whose probability hovers about the threshold is then heard in full, not
 *   in bursts whose count depends on where the 32 ms windows fall (jfk.wav's
 *   "ask not");
 * - quiet ends: inside an open utterance, a window no louder than the gate
 *   or `quietDb` above the noise floor, and 20 dB below the utterance's
 *   loudest window, is silence whatever the model says.
 *   The model still hears it (its state stays that of the whole stream), but
 *   its answer, which trails off for about 100 ms after speech ends, does not
 *   hold the utterance open;
 * - without a model, an energy threshold (`ENERGY_FALLBACK_MARGIN_DB` above
 *   the gate).
 */
import {
  WINDOW_SAMPLES,
  isDeferred,
  type Classifier,
  type ClassifierSource,
  type DeferredClassifier,
} from './vad.js';
import type { SegmenterOptions } from './segmenterTypes.js';

/**
 * Quiet ends apply only to windows this far below the loudest window of the
 * utterance: at a low signal-to-noise ratio speech itself sits within
 * `quietDb` of the floor, and only the model can tell it from the noise.
 */
const QUIET_BELOW_PEAK_DB = 20;
/** Fallback speech test when no model is available: this many dB above the gate. */
const ENERGY_FALLBACK_MARGIN_DB = 15;
/** classify(): the window waits for a batched model call. */
export const WAIT = Symbol('wait');

export class SpeechFlags {
  private readonly gateRms: number;
  private readonly fallbackRms: number;
  private readonly releaseAfterW: number;
  private readonly holdRatio: number;
  private readonly maxSkip: number;
  private readonly quietRatio: number;
  /** The window waiting for the model is quiet (at the floor, well below the utterance's loudest). */
  private quietWait = false;
  /** The window waiting for the model belongs to a candidate (its soft answer counts). */
  private softWait = false;
  /** The last flag was speech only by the soft rule (the model's exit threshold, in a candidate). */
  private softOnly = false;
  /** Loudest window (RMS) of the open utterance or candidate. */
  private peak = 0;
  private readonly peakRatio = Math.pow(10, QUIET_BELOW_PEAK_DB / 20);
  /** The last window's samples as floats, for the model. */
  private readonly scratch = new Float32Array(WINDOW_SAMPLES);
  private classifier: Classifier | null = null;
  private classifierThreshold = -1;
  private gatedRun = 0;
  private skipped = 0;
  private lastModelSpeech = false;
  /** Running estimate of the background level (RMS), from windows judged silent. */
  private noiseFloor = 0;
  /** Model invocations and windows seen, for measurements. */
  modelCalls = 0;
  windows = 0;

  constructor(
    private readonly source: ClassifierSource | null,
    opts: SegmenterOptions,
    windowMs: number,
  ) {
    this.gateRms = Math.pow(10, opts.gateDbfs / 20);
    this.fallbackRms = Math.pow(10, (opts.gateDbfs + ENERGY_FALLBACK_MARGIN_DB) / 20);
    this.releaseAfterW = Math.max(0, Math.round(opts.releaseAfterMs / windowMs));
    this.holdRatio = opts.holdDb ? Math.pow(10, opts.holdDb / 20) : 0;
    this.maxSkip = opts.maxSkip ?? 0;
    this.quietRatio = opts.quietDb ? Math.pow(10, opts.quietDb / 20) : 0;
  }

  get holdsModel(): boolean {
    return this.classifier !== null;
  }

  /** A new threshold takes a classifier for it at the next model window. */
  setThreshold(threshold: number): void {
    if (this.classifier && this.classifierThreshold !== threshold) this.release();
  }

  release(): void {
    this.classifier?.release();
    this.classifier = null;
    this.classifierThreshold = -1;
  }

  /** RMS of the window (0..1); its samples are kept as floats for the model. */
  rmsOf(w: Buffer): number {
    const n = WINDOW_SAMPLES;
    const s = this.scratch;
    let sum = 0;
    if (w.byteOffset % 2 === 0) {
      const x = new Int16Array(w.buffer, w.byteOffset, n);
      for (let i = 0; i < n; i++) {
        const v = x[i] / 32768;
        s[i] = v;
        sum += v * v;
      }
    } else {
      for (let i = 0; i < n; i++) {
        const v = w.readInt16LE(i * 2) / 32768;
        s[i] = v;
        sum += v * v;
      }
    }
    return Math.sqrt(sum / n);
  }

  /**
   * The flag of the window whose RMS `rmsOf` just gave: `idle` when no
   * utterance or candidate is open, `open` inside an utterance. WAIT: the
   * window went to a batched model call; `answer()` gives its flag after it.
   */
  classify(rms: number, s: { idle: boolean; open: boolean; threshold: number }): boolean | typeof WAIT {
    this.windows++;
    this.softOnly = false;
    this.peak = s.idle ? 0 : Math.max(this.peak, rms);
    if (s.idle && rms < this.gateRms) {
      this.gatedRun++;
      this.lastModelSpeech = false;
      this.trackFloor(rms);
      if (this.classifier && this.gatedRun >= this.releaseAfterW) this.release();
      return false;
    }
    this.gatedRun = 0;
    if (
      this.holdRatio > 0 &&
      s.open &&
      this.lastModelSpeech &&
      this.skipped < this.maxSkip &&
      rms >= Math.max(this.gateRms, this.noiseFloor) * this.holdRatio
    ) {
      this.skipped++;
      return true;
    }
    this.skipped = 0;
    if (!this.classifier && this.source) {
      this.classifier = this.source.acquire(s.threshold);
      this.classifierThreshold = s.threshold;
    }
    const quiet =
      this.quietRatio > 0 &&
      s.open &&
      rms <= Math.max(this.gateRms, this.noiseFloor * this.quietRatio) &&
      rms * this.peakRatio <= this.peak;
    let speech: boolean;
    if (this.classifier) {
      this.modelCalls++;
      if (isDeferred(this.classifier)) {
        if (!this.classifier.submit(this.scratch)) {
          this.quietWait = quiet;
          this.softWait = !s.idle && !s.open;
          return WAIT;
        }
        speech = this.classifier.take();
      } else {
        speech = this.classifier.isSpeech(this.scratch);
      }
      if (!s.idle && !s.open && !speech) speech = this.softOnly = this.classifier.soft?.() ?? false;
    } else {
      speech = rms >= this.fallbackRms;
    }
    speech &&= !quiet;
    this.afterModel(rms, speech);
    return speech;
  }

  /** The flag of the window that waited for the model (null: the classifier was handed back meanwhile). */
  answer(rms: number): boolean | null {
    const c = this.classifier as DeferredClassifier | null;
    if (!c) return null;
    this.softOnly = false;
    let speech = c.take();
    if (this.softWait && !speech) speech = this.softOnly = c.soft?.() ?? false;
    speech &&= !this.quietWait;
    this.quietWait = false;
    this.softWait = false;
    this.afterModel(rms, speech);
    return speech;
  }

  private afterModel(rms: number, speech: boolean): void {
    // The hold follows the model's own answers only.
    this.lastModelSpeech = speech && !this.softOnly;
    if (!speech) this.trackFloor(rms);
  }

  private trackFloor(rms: number): void {
    // Fast to fall, slow to rise: a floor, not an average.
    this.noiseFloor =
      this.noiseFloor === 0 || rms < this.noiseFloor ? rms : this.noiseFloor * 0.95 + rms * 0.05;
  }
}
