/**
 * Worker-thread entry: owns one PocketSphinx decoder and decodes one clip at
 * a time, so the event loop of the main thread never blocks on speech.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { Decoder, DecoderAbortedError, type DecoderOptions } from './decoder.js';
import type { BiasSpec } from '../bias/compile.js';

export interface DecodeJob {
  type?: 'decode';
  id: number;
  pcm: ArrayBuffer;
  /** Int32 flag set to 1 by the pool to abandon the job (timeout, client gone). */
  abort: SharedArrayBuffer;
  /** The request's compiled prompt and vocabulary (bias.ts). */
  bias?: BiasSpec;
}

/** Asks the thread to free its decoder and exit on its own (see BuiltinEngine.close). */
export interface CloseRequest {
  type: 'close';
}

export type ThreadMessage =
  | { type: 'ready'; initMs: number }
  | { type: 'result'; id: number; words: import('./decoder.js').RecognizedWord[]; decodeMs: number }
  | { type: 'failed'; id: number; message: string; aborted: boolean };

const port = parentPort!;
const started = performance.now();
let decoder = new Decoder(workerData as DecoderOptions);
port.postMessage({ type: 'ready', initMs: Math.round(performance.now() - started) } satisfies ThreadMessage);

port.on('message', (job: DecodeJob | CloseRequest) => {
  if (job.type === 'close') {
    // Exit by letting the event loop drain: terminating a thread while it is
    // inside a native call (loading the library, decoding) aborts the process.
    decoder.close();
    port.close();
    return;
  }
  const flag = new Int32Array(job.abort);
  const t0 = performance.now();
  try {
    if (decoder.wornOut) {
      // It has added as many prompt words as it may hold: a fresh one takes its place.
      decoder.close();
      decoder = new Decoder(workerData as DecoderOptions);
    }
    decoder.bias(job.bias);
    const words = decoder.decode(new Int16Array(job.pcm), () => Atomics.load(flag, 0) !== 0);
    port.postMessage({
      type: 'result',
      id: job.id,
      words,
      decodeMs: performance.now() - t0,
    } satisfies ThreadMessage);
  } catch (err) {
    port.postMessage({
      type: 'failed',
      id: job.id,
      message: (err as Error).message,
      aborted: err instanceof DecoderAbortedError,
    } satisfies ThreadMessage);
  }
});
