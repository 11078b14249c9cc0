/**
 * Silero VAD v5 through ONNX Runtime (onnxruntime-node's native CPU binding),
 * batched across streams. The model file ships inside the npm package
 * @ricky0123/vad-web (silero_vad_v5.onnx, MIT licence, (c) Silero Team).
 *
 * One `SileroModel` (one ONNX Runtime session) serves every stream of a
 * thread. Each stream's classifier (`SileroStream`) holds only what silero
 * carries from one window to the next: the LSTM state (2 x 128 floats), the
 * previous window, and the speech hysteresis. A stream queues its window
 * (`submit`) so that the windows of many streams are classified by one model
 * call (`SileroModel.run`, batch N): in one call the model's weights are read
 * once for all the streams, which is what makes hundreds of streams fit on a
 * core (measured in test/bench/realtime/silero-batch.ts). Model calls go
 * through onnxruntime-node's public, asynchronous `InferenceSession.run`;
 * the rounds of submit / run / take are driven by rounds.ts. `SileroPool` is
 * the realtime tier's `Vad` (vad.ts), chosen in factory.ts.
 *
 * The flags are those of sherpa-onnx's `Vad` (used before) configured as a
 * per-window classifier (one-window min speech/silence), window for window:
 * - the model sees 576 samples: the previous 512-sample window plus the first
 *   64 samples of the current one, so a stream's first window after a reset
 *   is not classified (false);
 * - silero's hysteresis: two windows above `threshold` enter speech, two
 *   windows at or below `threshold - 0.15` (the exit threshold) leave it.
 *   `soft()` says whether the last window's probability was above the exit
 *   threshold, for an owner that holds a phrase open (speechFlags.ts).
 * (Checked against sherpa on the test clips by the benchmark above.)
 *
 * Classifiers are pooled only for accounting and the `max` bound: a stream
 * holds one while it hears something above the energy gate (segmenter.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import { InferenceSession, Tensor } from 'onnxruntime-node';
import { batchedSileroModel, frameWindow, FRAMED_INPUT, FRAMES, FRAME } from './sileroGraph.js';
import { WINDOW_SAMPLES, type DeferredClassifier, type PoolStats, type Vad, type VadOptions } from './vad.js';

// Silero v5 at 16 kHz reads windows of 512 samples (32 ms): the VAD's window (vad.ts).
/** Samples of the next window the model sees after the current one (silero v5 at 16 kHz). */
const OVERLAP = 64;
const INPUT = WINDOW_SAMPLES + OVERLAP;
/** LSTM state per stream: 2 x [1, 128]. */
const HIDDEN = 128;
/** Hysteresis lengths in samples: one window (as sherpa with 0.032 s min speech/silence). */
const MIN_SPEECH_SAMPLES = WINDOW_SAMPLES;
const MIN_SILENCE_SAMPLES = WINDOW_SAMPLES;
/** Speech goes on while the probability stays above `threshold - EXIT_MARGIN` (silero's negative threshold). */
const EXIT_MARGIN = 0.15;

// ---- model ---------------------------------------------------------------------------------------

/** One ONNX Runtime session classifying the queued windows of many streams per call. */
export class SileroModel {
  private queue: SileroStream[] = [];
  /** The last model call: calls run one after the other (they share the input buffers). */
  private last: Promise<void> = Promise.resolve();
  private input = new Float32Array(0);
  private state = new Float32Array(0);
  /** Model calls and windows classified, for measurements. */
  calls = 0;
  windows = 0;

  private constructor(private readonly session: InferenceSession) {}

  static async load(modelPath: string): Promise<SileroModel> {
    if (!existsSync(modelPath)) throw new Error(`silero VAD model not found at ${modelPath}`);
    // The shipped graph's weights in a graph of batched matrix products (sileroGraph.ts).
    const graph = batchedSileroModel(new Uint8Array(readFileSync(modelPath)));
    const session = await InferenceSession.create(graph, {
      // One thread: the realtime process spreads streams over VAD threads itself.
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
    return new SileroModel(session);
  }

  /** Windows waiting for `run()`. */
  get pending(): number {
    return this.queue.length;
  }

  enqueue(s: SileroStream): void {
    this.queue.push(s);
  }

  /**
   * Classifies every window queued so far in one model call; resolves once each of
   * them has its flag. Calls queue behind each other.
   */
  run(): Promise<void> {
    const q = this.queue;
    if (q.length === 0) return this.last;
    this.queue = [];
    this.last = this.last.then(() => this.classify(q));
    return this.last;
  }

  private async classify(q: SileroStream[]): Promise<void> {
    const n = q.length;
    if (this.input.length < n * FRAMED_INPUT) {
      const cap = Math.max(n, 2 * (this.input.length / FRAMED_INPUT), 8);
      this.input = new Float32Array(cap * FRAMED_INPUT);
      this.state = new Float32Array(cap * 2 * HIDDEN);
    }
    const input =
      n * FRAMED_INPUT === this.input.length ? this.input : this.input.subarray(0, n * FRAMED_INPUT);
    const state = 2 * n * HIDDEN === this.state.length ? this.state : this.state.subarray(0, 2 * n * HIDDEN);
    // state is [2, n, 128]: layer-major.
    const layer = n * HIDDEN;
    for (let i = 0; i < n; i++) {
      const s = q[i];
      frameWindow(s.x, input, i * FRAMED_INPUT);
      state.set(s.h.subarray(0, HIDDEN), i * HIDDEN);
      state.set(s.h.subarray(HIDDEN), layer + i * HIDDEN);
    }
    const out = await this.session.run(
      {
        frames: new Tensor('float32', input, [n, FRAMES, FRAME]),
        state: new Tensor('float32', state, [2, n, HIDDEN]),
      },
      OUTPUTS,
    );
    const prob = out.output.data as Float32Array;
    const next = out.stateN.data as Float32Array;
    for (let i = 0; i < n; i++) {
      const s = q[i];
      s.h.set(next.subarray(i * HIDDEN, (i + 1) * HIDDEN), 0);
      s.h.set(next.subarray(layer + i * HIDDEN, layer + (i + 1) * HIDDEN), HIDDEN);
      s.resolve(prob[i]);
    }
    this.calls++;
    this.windows += n;
  }

  async close(): Promise<void> {
    await this.last.catch(() => {});
    await this.session.release();
  }
}

const OUTPUTS = ['output', 'stateN'];

/** One stream's silero: LSTM state, previous window, hysteresis. */
export class SileroStream implements DeferredClassifier {
  /** The queued model input: previous window + OVERLAP samples of the current one. */
  readonly x = new Float32Array(INPUT);
  /** The last window submitted. */
  private readonly prev = new Float32Array(WINDOW_SAMPLES);
  /** LSTM state, layer 0 then layer 1. */
  readonly h = new Float32Array(2 * HIDDEN);
  private hasPrev = false;
  private thresholdF = 0.5;
  private triggered = false;
  private currentSample = 0;
  private tempStart = 0;
  private tempEnd = 0;
  private result = false;
  private lastProb = 0;
  private waiting = false;
  /** Released while its window was queued: handed back once the model has run. */
  private releaseAfterRun = false;

  constructor(
    private readonly model: SileroModel,
    threshold: number,
    private readonly onRelease: (s: SileroStream) => void = () => {},
  ) {
    this.setThreshold(threshold);
  }

  setThreshold(threshold: number): void {
    // sherpa keeps the threshold as a C float.
    this.thresholdF = Math.fround(threshold);
  }

  reset(): void {
    this.h.fill(0);
    this.hasPrev = false;
    this.triggered = false;
    this.currentSample = 0;
    this.tempStart = 0;
    this.tempEnd = 0;
    this.result = false;
    this.lastProb = 0;
    this.waiting = false;
    this.releaseAfterRun = false;
  }

  submit(window: Float32Array): boolean {
    if (!this.hasPrev) {
      // Nothing to classify yet: the model's input ends OVERLAP samples into the next window.
      this.prev.set(window);
      this.hasPrev = true;
      this.result = false;
      this.lastProb = 0;
      return true;
    }
    this.x.set(this.prev, 0);
    this.x.set(window.subarray(0, OVERLAP), WINDOW_SAMPLES);
    this.prev.set(window);
    this.waiting = true;
    this.model.enqueue(this);
    return false;
  }

  take(): boolean {
    if (this.waiting) throw new Error('silero: take() before the model ran');
    return this.result;
  }

  soft(): boolean {
    if (this.waiting) throw new Error('silero: soft() before the model ran');
    return this.lastProb > this.thresholdF - EXIT_MARGIN;
  }

  release(): void {
    if (this.waiting) this.releaseAfterRun = true;
    else this.onRelease(this);
  }

  /** Called by the model with this window's speech probability (the state is already updated). */
  resolve(prob: number): void {
    this.waiting = false;
    this.lastProb = prob;
    this.result = this.hysteresis(prob);
    if (this.releaseAfterRun) {
      this.releaseAfterRun = false;
      this.onRelease(this);
    }
  }

  private hysteresis(prob: number): boolean {
    const th = this.thresholdF;
    this.currentSample += WINDOW_SAMPLES;
    if (prob > th && this.tempEnd !== 0) this.tempEnd = 0;
    if (prob > th && this.tempStart === 0) {
      this.tempStart = this.currentSample;
      return false;
    }
    if (prob > th && this.tempStart !== 0 && !this.triggered) {
      if (this.currentSample - this.tempStart < MIN_SPEECH_SAMPLES) return false;
      this.triggered = true;
      return true;
    }
    if (prob < th && !this.triggered) {
      this.tempStart = 0;
      this.tempEnd = 0;
      return false;
    }
    if (prob > th - EXIT_MARGIN && this.triggered) return true;
    if (prob > th && !this.triggered) {
      this.triggered = true;
      return true;
    }
    if (prob < th && this.triggered) {
      if (this.tempEnd === 0) this.tempEnd = this.currentSample;
      if (this.currentSample - this.tempEnd < MIN_SILENCE_SAMPLES) return true;
      this.tempStart = 0;
      this.tempEnd = 0;
      this.triggered = false;
      return false;
    }
    return false;
  }
}

/** Per-stream classifiers over one shared model: silero as the `Vad` (vad.ts). */
export class SileroPool implements Vad {
  private readonly idle: SileroStream[] = [];
  private created = 0;
  private inUse = 0;

  private constructor(
    private readonly model: SileroModel,
    private readonly opts: VadOptions,
  ) {
    for (let i = 0; i < opts.warm && i < opts.max; i++) this.idle.push(this.create());
  }

  static async load(opts: VadOptions): Promise<SileroPool> {
    return new SileroPool(await SileroModel.load(opts.modelPath), opts);
  }

  run(): Promise<void> {
    return this.model.run();
  }

  get pending(): number {
    return this.model.pending;
  }

  get stats(): PoolStats {
    return {
      created: this.created,
      inUse: this.inUse,
      idle: this.idle.length,
      calls: this.model.calls,
      windows: this.model.windows,
    };
  }

  private create(): SileroStream {
    this.created++;
    return new SileroStream(this.model, 0.5, (s) => this.giveBack(s));
  }

  private giveBack(s: SileroStream): void {
    this.inUse--;
    s.reset();
    this.idle.push(s);
  }

  /** A classifier for one stream, or null when the pool is exhausted. */
  acquire(threshold: number): DeferredClassifier | null {
    let s = this.idle.pop();
    if (!s) {
      if (this.created >= this.opts.max) return null;
      s = this.create();
    }
    this.inUse++;
    s.setThreshold(threshold);
    let released = false;
    const held = s;
    // A handle per acquisition, so that a second release() of a stale handle is harmless.
    return {
      submit: (w) => held.submit(w),
      take: () => held.take(),
      soft: () => held.soft(),
      release: () => {
        if (released) return;
        released = true;
        held.release();
      },
    };
  }
}
