/**
 * Silero VAD cost per 32 ms window: one model call per window per stream
 * versus one batched call over many streams (shared/vad/silero.ts), and the
 * previous implementation (one sherpa-onnx `Vad`, i.e. one ONNX Runtime
 * session, per stream) side by side. Figures in docs/benchmarks.md
 * ("## Realtime").
 *
 *   npx tsx test/bench/realtime/silero-batch.ts [--streams 200] [--windows 150] [--rounds 3]
 *
 * Every stream hears the speech loop of the load generator (the test clips
 * joined with 600 ms pauses) from its own starting point; every window goes
 * to the model (no energy gate, no speech hold), round-robin over the streams
 * as the VAD thread does. CPU time is the process's (user + system) per
 * window; modes alternate within each round and medians are reported.
 *
 * It also checks that the flags are the same window for window: batched vs
 * batch-1 calls of the same model, and against sherpa-onnx (a different
 * ONNX Runtime build; the hysteresis and windowing are replicated from it).
 */
import { createRequire } from 'node:module';
import { loadConfig } from '../../../shared/config/index.js';
import { SileroModel, SileroStream, WINDOW_SAMPLES, SAMPLE_RATE } from '../../../shared/vad/silero.js';
import { speechLoop } from '../../load/realtime-load.js';

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const STREAMS = arg('streams', 200);
const WINDOWS = arg('windows', 150);
const ROUNDS = arg('rounds', 3);
const BATCHES = [1, 16, 64, STREAMS].filter((b, i, a) => b <= STREAMS && a.indexOf(b) === i);
const modelPath = loadConfig({}).realtime.vad.modelPath;
/** Half the streams at the default threshold, half at a lower one (hysteresis checked at both). */
const thresholdOf = (s: number) => (s % 2 === 0 ? 0.5 : 0.3);

// Each stream's windows as floats, starting at its own place in the speech loop.
const loop = speechLoop();
const loopWindows = Math.floor(loop.length / 2 / WINDOW_SAMPLES);
const audio: Float32Array[][] = [];
for (let s = 0; s < STREAMS; s++) {
  const start = Math.floor((s * loopWindows) / STREAMS);
  const ws: Float32Array[] = [];
  for (let w = 0; w < WINDOWS; w++) {
    const at = ((start + w) % loopWindows) * WINDOW_SAMPLES * 2;
    const f = new Float32Array(WINDOW_SAMPLES);
    for (let i = 0; i < WINDOW_SAMPLES; i++) f[i] = loop.readInt16LE(at + i * 2) / 32768;
    ws.push(f);
  }
  audio.push(ws);
}

const cpuUs = () => {
  const c = process.cpuUsage();
  return c.user + c.system;
};

/** Flags per stream, and CPU µs per window. */
type Result = { flags: Uint8Array[]; usPerWindow: number };

function runOrt(model: SileroModel, batch: number): Result {
  const streams = audio.map((_, s) => new SileroStream(model, thresholdOf(s)));
  const flags = audio.map(() => new Uint8Array(WINDOWS));
  const t0 = cpuUs();
  for (let w = 0; w < WINDOWS; w++) {
    for (let g = 0; g < STREAMS; g += batch) {
      const end = Math.min(STREAMS, g + batch);
      if (batch === 1) {
        flags[g][w] = streams[g].isSpeech(audio[g][w]) ? 1 : 0;
        continue;
      }
      for (let s = g; s < end; s++) streams[s].submit(audio[s][w]);
      model.run();
      for (let s = g; s < end; s++) flags[s][w] = streams[s].take() ? 1 : 0;
    }
  }
  return { flags, usPerWindow: (cpuUs() - t0) / (STREAMS * WINDOWS) };
}

interface SherpaVad {
  acceptWaveform(samples: Float32Array): void;
  isDetected(): boolean;
  isEmpty(): boolean;
  pop(): void;
  flush(): void;
}

/** The previous per-stream implementation: one sherpa Vad per stream, used as a window classifier. */
function sherpaVads(): SherpaVad[] | null {
  let sherpa: { Vad: new (config: unknown, bufferSeconds: number) => SherpaVad };
  try {
    sherpa = createRequire(import.meta.url)('sherpa-onnx-node');
  } catch {
    return null;
  }
  return audio.map(
    (_, s) =>
      new sherpa.Vad(
        {
          sileroVad: { model: modelPath, threshold: thresholdOf(s), minSilenceDuration: 0.032, minSpeechDuration: 0.032, windowSize: WINDOW_SAMPLES, maxSpeechDuration: 60 },
          sampleRate: SAMPLE_RATE,
          numThreads: 1,
          provider: 'cpu',
          debug: 0,
        },
        4,
      ),
  );
}

function runSherpa(vads: SherpaVad[]): Result {
  const flags = audio.map(() => new Uint8Array(WINDOWS));
  const detected = new Array<number>(STREAMS).fill(0);
  const t0 = cpuUs();
  for (let w = 0; w < WINDOWS; w++) {
    for (let s = 0; s < STREAMS; s++) {
      const v = vads[s];
      v.acceptWaveform(audio[s][w]);
      while (!v.isEmpty()) v.pop();
      const speech = v.isDetected();
      if (speech && ++detected[s] % 100 === 0) {
        v.flush();
        while (!v.isEmpty()) v.pop();
      }
      flags[s][w] = speech ? 1 : 0;
    }
  }
  return { flags, usPerWindow: (cpuUs() - t0) / (STREAMS * WINDOWS) };
}

function differing(a: Uint8Array[], b: Uint8Array[]): number {
  let n = 0;
  for (let s = 0; s < a.length; s++) for (let w = 0; w < a[s].length; w++) if (a[s][w] !== b[s][w]) n++;
  return n;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const model = new SileroModel(modelPath);
const times = new Map<string, number[]>();
const note = (k: string, us: number) => (times.get(k) ?? times.set(k, []).get(k)!).push(us);
let reference: Uint8Array[] | null = null;
const mismatches: Record<string, number> = {};
let speechShare = 0;

for (let r = 0; r < ROUNDS; r++) {
  // Fresh sherpa instances each round (each is its own ONNX Runtime session); created outside the timing.
  const vads = sherpaVads();
  if (vads) {
    const res = runSherpa(vads);
    note('sherpa, one session per stream', res.usPerWindow);
    if (r === 0) reference = res.flags;
  }
  for (const b of BATCHES) {
    const res = runOrt(model, b);
    note(`onnxruntime-node, batch ${b}`, res.usPerWindow);
    if (r === 0) {
      if (b === 1) {
        speechShare = res.flags.reduce((n, f) => n + f.reduce((m, x) => m + x, 0), 0) / (STREAMS * WINDOWS);
        if (reference) mismatches['batch 1 vs sherpa'] = differing(res.flags, reference);
        reference ??= res.flags;
      } else {
        mismatches[`batch ${b} vs ${vads ? 'sherpa' : 'batch 1'}`] = differing(res.flags, reference!);
      }
    }
  }
}

const baseline = median(times.get('onnxruntime-node, batch 1')!);
console.log(
  JSON.stringify(
    {
      bench: 'silero v5 CPU per 32 ms window',
      streams: STREAMS,
      windowsPerStream: WINDOWS,
      rounds: ROUNDS,
      speechWindowShare: Math.round(speechShare * 1000) / 1000,
      medianUsPerWindow: Object.fromEntries([...times].map(([k, v]) => [k, Math.round(median(v) * 10) / 10])),
      allUsPerWindow: Object.fromEntries([...times].map(([k, v]) => [k, v.map((x) => Math.round(x))])),
      speedupOverBatch1: Object.fromEntries([...times].map(([k, v]) => [k, Math.round((baseline / median(v)) * 100) / 100])),
      differingFlags: mismatches,
      totalWindows: STREAMS * WINDOWS,
    },
    null,
    2,
  ),
);
model.close();
