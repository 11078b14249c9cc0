/**
 * Silero VAD v5 through sherpa-onnx-node. The model file ships inside the npm
 * package @ricky0123/vad-web (silero_vad_v5.onnx, MIT licence, (c) Silero Team).
 *
 * sherpa's `Vad` is stateful per stream and costs about 8 MB and 40 ms to
 * create (one ONNX Runtime session each), so instances are pooled: a stream
 * holds one only while it hears something above the energy gate, and hands it
 * back (reset) after a few seconds of gated silence. Silent streams therefore
 * cost neither memory nor model time.
 *
 * We use sherpa as a per-window classifier: its own segmentation is disabled
 * (one-window min silence/speech) and `isDetected()` after each 512-sample window is
 * the speech flag, with silero's usual hysteresis (threshold to enter,
 * threshold - 0.15 to stay). Utterance policy lives in segmenter.ts.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';

const require = createRequire(import.meta.url);

/** Samples per model window at 16 kHz (32 ms), fixed by silero v5. */
export const WINDOW_SAMPLES = 512;
export const SAMPLE_RATE = 16_000;
/** sherpa's per-instance sample buffer. */
const BUFFER_SECONDS = 4;
/** Detected windows between flushes of sherpa's segment buffer (~3.2 s, inside BUFFER_SECONDS). */
const FLUSH_EVERY = 100;

interface SherpaVad {
  acceptWaveform(samples: Float32Array): void;
  isDetected(): boolean;
  isEmpty(): boolean;
  pop(): void;
  reset(): void;
  flush(): void;
}

export interface WindowClassifier {
  /** Speech flag for one 512-sample window (float samples in [-1, 1]). */
  isSpeech(window: Float32Array): boolean;
  /** Give the model back; the classifier must not be used afterwards. */
  release(): void;
}

export interface SileroPoolOptions {
  modelPath: string;
  /** Instances created up front. */
  warm: number;
  /** Never more instances than this (in use + idle). */
  max: number;
}

export class SileroPool {
  private readonly idle = new Map<number, SherpaVad[]>();
  private created = 0;
  private inUse = 0;
  private readonly sherpa: { Vad: new (config: unknown, bufferSeconds: number) => SherpaVad };

  constructor(private readonly opts: SileroPoolOptions) {
    if (!existsSync(opts.modelPath)) throw new Error(`silero VAD model not found at ${opts.modelPath}`);
    this.sherpa = require('sherpa-onnx-node') as typeof this.sherpa;
    for (let i = 0; i < opts.warm && i < opts.max; i++) this.stash(0.5, this.create(0.5));
  }

  get stats(): { created: number; inUse: number; idle: number } {
    let idle = 0;
    for (const l of this.idle.values()) idle += l.length;
    return { created: this.created, inUse: this.inUse, idle };
  }

  private create(threshold: number): SherpaVad {
    this.created++;
    return new this.sherpa.Vad(
      {
        sileroVad: {
          model: this.opts.modelPath,
          threshold,
          // One window each: zero makes sherpa's silero start late and sometimes never end.
          minSilenceDuration: 0.032,
          minSpeechDuration: 0.032,
          windowSize: WINDOW_SAMPLES,
          maxSpeechDuration: 60,
        },
        sampleRate: SAMPLE_RATE,
        numThreads: 1,
        provider: 'cpu',
        debug: 0,
      },
      // sherpa keeps the open segment's samples here; isSpeech() flushes them every few seconds.
      BUFFER_SECONDS,
    );
  }

  private stash(threshold: number, vad: SherpaVad): void {
    const key = Math.round(threshold * 100);
    let list = this.idle.get(key);
    if (!list) this.idle.set(key, (list = []));
    list.push(vad);
  }

  /** A classifier for one stream, or null when the pool is exhausted. */
  acquire(threshold: number): WindowClassifier | null {
    const key = Math.round(threshold * 100);
    let vad = this.idle.get(key)?.pop();
    if (!vad) {
      if (this.created >= this.opts.max) {
        // Re-purpose an idle instance of another threshold before giving up.
        for (const [k, list] of this.idle) {
          if (list.length > 0 && k !== key) {
            list.pop();
            this.created--;
            break;
          }
        }
        if (this.created >= this.opts.max) return null;
      }
      vad = this.create(key / 100);
    }
    this.inUse++;
    const held = vad;
    let released = false;
    let detected = 0;
    return {
      isSpeech: (window) => {
        held.acceptWaveform(window);
        // Segments are not used; drop them so sherpa's buffer does not grow.
        while (!held.isEmpty()) held.pop();
        const speech = held.isDetected();
        // Long speech would grow sherpa's buffer (it keeps the open segment's samples). Flushing
        // cuts its segment without touching the model state: the next window re-opens it, and the
        // flags are identical (checked on the longest test clip).
        if (speech && ++detected % FLUSH_EVERY === 0) {
          held.flush();
          while (!held.isEmpty()) held.pop();
        }
        return speech;
      },
      release: () => {
        if (released) return;
        released = true;
        this.inUse--;
        held.reset();
        this.stash(key / 100, held);
      },
    };
  }
}
