/**
 * Silero VAD cost per 32 ms window, side by side:
 * - the previous implementation: one sherpa-onnx `Vad` (one ONNX Runtime
 *   session) per stream, one window per call;
 * - the shipped silero graph in one onnxruntime-node session, batch B;
 * - the batched rewrite of that graph (realtime/vad/sileroGraph.ts) as used by
 *   realtime/vad/silero.ts, batch B.
 * Figures in docs/benchmarks/realtime.md.
 *
 *   npx tsx test/bench/realtime/silero-batch.ts [--streams 200] [--windows 150] [--rounds 3]
 *
 * Every stream hears the speech loop of the load generator (the test clips
 * joined with 600 ms pauses) from its own starting point; every window goes
 * to the model (no energy gate, no speech hold), round-robin over the streams
 * as the VAD thread does. CPU time is the process's (user + system) per
 * window; modes alternate within each round and medians are reported.
 *
 * It also checks that the flags are the same window for window as sherpa's
 * (the hysteresis and windowing are replicated from it; the rewrite only
 * changes the order of sums), and reports the largest difference of speech
 * probability between the shipped graph and the rewrite.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { InferenceSession, Tensor } from 'onnxruntime-node';
import { loadConfig } from '../../../shared/config/index.js';
import { SileroModel, SileroStream } from '../../../realtime/vad/silero.js';
import { WINDOW_SAMPLES, SAMPLE_RATE } from '../../../realtime/vad/vad.js';
import { batchedSileroModel, frameWindow, FRAMED_INPUT } from '../../../realtime/vad/sileroGraph.js';
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

// The shipped graph through the same (public, asynchronous) API: timing, and probabilities to
// compare with the rewrite.
const ORT_OPTIONS: InferenceSession.SessionOptions = {
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  graphOptimizationLevel: 'all',
};
const OUTPUTS = ['output', 'stateN'];
const require = createRequire(import.meta.url);
const shipped = await InferenceSession.create(modelPath, ORT_OPTIONS);
const graph = batchedSileroModel(new Uint8Array(fs.readFileSync(modelPath)));
const rewritten = await InferenceSession.create(graph, ORT_OPTIONS);
const SR = new Tensor('int64', BigInt64Array.from([16000n]), []);
const f32 = (t: Tensor) => t.data as Float32Array;

/** The shipped graph, batch B (every window after each stream's first; state kept per stream). */
async function runShipped(batch: number): Promise<number> {
  const states = audio.map(() => new Float32Array(256));
  const t0 = cpuUs();
  for (let w = 1; w < WINDOWS; w++) {
    for (let g = 0; g < STREAMS; g += batch) {
      const n = Math.min(STREAMS, g + batch) - g;
      const input = new Float32Array(n * 576);
      const state = new Float32Array(2 * n * 128);
      for (let i = 0; i < n; i++) {
        input.set(audio[g + i][w - 1], i * 576);
        input.set(audio[g + i][w].subarray(0, 64), i * 576 + 512);
        state.set(states[g + i].subarray(0, 128), i * 128);
        state.set(states[g + i].subarray(128), (n + i) * 128);
      }
      const out = await shipped.run(
        {
          input: new Tensor('float32', input, [n, 576]),
          state: new Tensor('float32', state, [2, n, 128]),
          sr: SR,
        },
        OUTPUTS,
      );
      const next = f32(out.stateN);
      for (let i = 0; i < n; i++) {
        states[g + i].set(next.subarray(i * 128, (i + 1) * 128), 0);
        states[g + i].set(next.subarray((n + i) * 128, (n + i + 1) * 128), 128);
      }
    }
  }
  return (cpuUs() - t0) / (STREAMS * (WINDOWS - 1));
}

/** Largest |p_shipped - p_rewritten| over every stream's windows, state carried by each graph. */
async function maxProbabilityDifference(): Promise<number> {
  const n = STREAMS;
  let s1: Float32Array = new Float32Array(2 * n * 128);
  let s2: Float32Array = new Float32Array(2 * n * 128);
  let max = 0;
  for (let w = 1; w < WINDOWS; w++) {
    const input = new Float32Array(n * 576);
    const frames = new Float32Array(n * FRAMED_INPUT);
    for (let i = 0; i < n; i++) {
      input.set(audio[i][w - 1], i * 576);
      input.set(audio[i][w].subarray(0, 64), i * 576 + 512);
      frameWindow(input.subarray(i * 576, (i + 1) * 576), frames, i * FRAMED_INPUT);
    }
    const a = await shipped.run(
      {
        input: new Tensor('float32', input, [n, 576]),
        state: new Tensor('float32', s1, [2, n, 128]),
        sr: SR,
      },
      OUTPUTS,
    );
    const b = await rewritten.run(
      {
        frames: new Tensor('float32', frames, [n, 4, 256]),
        state: new Tensor('float32', s2, [2, n, 128]),
      },
      OUTPUTS,
    );
    const pa = f32(a.output);
    const pb = f32(b.output);
    for (let i = 0; i < n; i++) max = Math.max(max, Math.abs(pa[i] - pb[i]));
    s1 = f32(a.stateN);
    s2 = f32(b.stateN);
  }
  return max;
}

async function runOrt(model: SileroModel, batch: number): Promise<Result> {
  const streams = audio.map((_, s) => new SileroStream(model, thresholdOf(s)));
  const flags = audio.map(() => new Uint8Array(WINDOWS));
  const t0 = cpuUs();
  for (let w = 0; w < WINDOWS; w++) {
    for (let g = 0; g < STREAMS; g += batch) {
      const end = Math.min(STREAMS, g + batch);
      for (let s = g; s < end; s++) streams[s].submit(audio[s][w]);
      await model.run();
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
    sherpa = require('sherpa-onnx-node');
  } catch {
    return null;
  }
  return audio.map(
    (_, s) =>
      new sherpa.Vad(
        {
          sileroVad: {
            model: modelPath,
            threshold: thresholdOf(s),
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

const model = await SileroModel.load(modelPath);
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
  for (const b of [1, 64].filter((x) => x <= STREAMS)) note(`shipped graph, batch ${b}`, await runShipped(b));
  for (const b of BATCHES) {
    const res = await runOrt(model, b);
    note(`batched rewrite, batch ${b}`, res.usPerWindow);
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

const baseline = median(
  times.get('sherpa, one session per stream') ?? times.get('batched rewrite, batch 1')!,
);
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
      maxProbabilityDifferenceShippedVsRewrite: await maxProbabilityDifference(),
      speedupOverSherpa: Object.fromEntries(
        [...times].map(([k, v]) => [k, Math.round((baseline / median(v)) * 100) / 100]),
      ),
      differingFlags: mismatches,
      totalWindows: STREAMS * WINDOWS,
    },
    null,
    2,
  ),
);
await model.close();
