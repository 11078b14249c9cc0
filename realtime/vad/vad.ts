/**
 * What segmentation needs of a voice activity detector, so that the
 * segmenter, its rounds and the VAD service depend on this and not on the
 * model behind it (silero.ts implements it; factory.ts chooses it).
 *
 * A `Vad` serves many streams of one thread: each stream holds a classifier
 * (its own state: the model's memory of the stream, hysteresis) only while
 * it needs one (`acquire` / `release`, which resets it), and the windows
 * its classifiers queue are classified together by one batched call
 * (`run`). Windows are fixed: `WINDOW_SAMPLES` samples of 16 kHz audio
 * (32 ms), the window the segmenter cuts and silero v5 reads.
 */
import { PCM_SAMPLE_RATE } from '../../shared/audio/pcm.js';

/** Samples per classified window (32 ms at `SAMPLE_RATE`). */
export const WINDOW_SAMPLES = 512;
export const SAMPLE_RATE = PCM_SAMPLE_RATE;

/** A classifier that answers at once (the energy fallback in tests, stand-ins). */
export interface WindowClassifier {
  /** Speech flag for one window (float samples in [-1, 1]). */
  isSpeech(window: Float32Array): boolean;
  /** The last window was above the exit threshold: speech that had started would go on (absent: the flag). */
  soft?(): boolean;
  /** Give the classifier back (its state is reset); it must not be used afterwards. */
  release(): void;
}

/**
 * A classifier whose windows wait for a batched call: `submit` queues the
 * window (or answers at once, returning true, when no call is needed); once
 * the owner's `Vad.run()` has resolved, `take()` gives the flag.
 */
export interface DeferredClassifier {
  submit(window: Float32Array): boolean;
  take(): boolean;
  /** After `take()`: the window was above the exit threshold (speech that had started would go on). */
  soft?(): boolean;
  /** Give the classifier back (its state is reset); it must not be used afterwards. */
  release(): void;
}

export type Classifier = WindowClassifier | DeferredClassifier;

export function isDeferred(c: Classifier): c is DeferredClassifier {
  return 'submit' in c && typeof c.submit === 'function';
}

export interface ClassifierSource {
  /** A classifier for the given threshold, or null (energy fallback is used). */
  acquire(threshold: number): Classifier | null;
}

export interface PoolStats {
  /** Per-stream classifiers: created, held by a stream, free. */
  created: number;
  inUse: number;
  idle: number;
  /** Batched calls so far and windows they classified (windows / calls = mean batch). */
  calls: number;
  windows: number;
}

/** Per-stream classifiers over one model, classified in batches. */
export interface Vad extends ClassifierSource {
  /** Classifies every window queued so far in one call; resolves once each has its flag. Calls queue. */
  run(): Promise<void>;
  /** Windows waiting for `run()`. */
  readonly pending: number;
  readonly stats: PoolStats;
}

export interface VadOptions {
  modelPath: string;
  /** Classifiers created up front. */
  warm: number;
  /** Never more classifiers than this (in use + idle); beyond it streams fall back to the energy detector. */
  max: number;
}
