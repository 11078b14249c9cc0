/**
 * The client's PCM16LE at 24 kHz (OpenAI's `audio/pcm`, `pcm16`) to the
 * 16 kHz the VAD and the engines read, once, as the audio arrives: a
 * polyphase FIR (up 2, low-pass at 7.2 kHz, down 3; 48 taps, Blackman
 * windowed sinc), with its state carried from frame to frame so the result
 * does not depend on how the audio was cut into frames. The arithmetic runs
 * in WebAssembly SIMD (realtime/kernel.wat, single precision): about a
 * fifth of the time of the same filter in JavaScript. Its delay (about
 * 0.5 ms) is far below anything reported in whole milliseconds.
 */

import { FREE_AT, TAPS_AT, base64Length, decodeBase64At, loadKernel, type Kernel } from './kernel.js';

const UP = 2;
const DOWN = 3;
const TAPS = 48;
/** Input samples one output sample reads. */
const SPAN = TAPS / UP;
const Q15 = 32768;

/** h[k] of the low-pass at the upsampled rate (48 kHz), gain UP. Exported for its test. */
export const LOWPASS_48K: Readonly<Float64Array> = (() => {
  const cutoff = 7200 / 48000;
  const h = new Float64Array(TAPS);
  const mid = (TAPS - 1) / 2;
  for (let k = 0; k < TAPS; k++) {
    const x = k - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w =
      0.42 - 0.5 * Math.cos((2 * Math.PI * k) / (TAPS - 1)) + 0.08 * Math.cos((4 * Math.PI * k) / (TAPS - 1));
    h[k] = sinc * w;
  }
  let sum = 0;
  for (const v of h) sum += v;
  for (let k = 0; k < TAPS; k++) h[k] = (h[k] * UP) / sum;
  return h;
})();

/**
 * The filter runs in the realtime tier's WebAssembly kernel (realtime/kernel.ts), whose memory
 * every session's chunks pass through in turn. Taps are stored reversed by phase: output m reads
 * input samples floor(3m/2) - 23 .. floor(3m/2) with phase m % 2.
 */
let tapsLoaded = false;

function filterKernel(): Kernel {
  const k = loadKernel();
  if (tapsLoaded) return k;
  // Q15: the largest tap (about 0.6) fits 16 bits, and no sum of 24 products overflows 32.
  const taps = new Int16Array(k.heap(FREE_AT), TAPS_AT, 2 * SPAN);
  for (let j = 0; j < SPAN; j++) {
    taps[j] = Math.round(LOWPASS_48K[UP * (SPAN - 1 - j)] * Q15);
    taps[SPAN + j] = Math.round(LOWPASS_48K[1 + UP * (SPAN - 1 - j)] * Q15);
  }
  tapsLoaded = true;
  return k;
}

/** Where one chunk of `n` input samples and its output lie in the kernel's memory. */
function layout(n: number) {
  const inPtr = FREE_AT;
  // 32 bytes after each region: the filter reads up to 5 samples past its input and writes up
  // to 3 past its output; the base64 decoder writes up to 4 bytes past its output.
  const oPtr = inPtr + (((SPAN + n) * 2 + 32 + 15) & ~15);
  // At most 2n/3 + 1 outputs: n samples' bytes hold them.
  const srcPtr = oPtr + ((n * 2 + 8 + 32 + 15) & ~15);
  return { inPtr, oPtr, srcPtr };
}

export class Resampler24To16 {
  /** The last SPAN input samples (all an idle session holds). */
  private readonly history = new Int16Array(SPAN);
  /** Input samples consumed so far, and output samples produced. */
  private inCount = 0;
  private outCount = 0;

  /**
   * Converts one chunk (whole samples); returns the 16 kHz samples it completes, in a new buffer,
   * or with `transient` in the kernel's memory, valid until its next call (for a caller that
   * copies them at once, as the session does with every frame's audio).
   */
  push(chunk: Buffer, transient = false): Buffer {
    const k = filterKernel();
    const n = chunk.length >> 1;
    const at = layout(n);
    const heap = k.heap(at.srcPtr);
    // The chunk's bytes (any byte offset: frames arrive as slices of larger buffers).
    new Uint8Array(heap, at.inPtr + SPAN * 2, n * 2).set(chunk.subarray(0, n * 2));
    return this.filter(k, heap, n, transient);
  }

  /**
   * Converts one chunk given as base64 bytes (an append's audio, straight from the frame):
   * null, with nothing consumed, unless it is strict base64 of whole samples, at most `maxBytes`.
   * The samples are transient (see push).
   */
  pushBase64(text: Uint8Array, maxBytes: number): Buffer | null {
    const bytes = base64Length(text);
    if (bytes < 0 || bytes > maxBytes || bytes % 2 !== 0) return null;
    const k = filterKernel();
    const n = bytes >> 1;
    const at = layout(n);
    const heap = k.heap(at.srcPtr + text.length + 16);
    if (!decodeBase64At(heap, text, at.srcPtr, at.inPtr + SPAN * 2)) return null;
    return this.filter(k, heap, n, true);
  }

  /** Runs the filter over the history and the chunk's `n` samples already in place. */
  private filter(k: Kernel, heap: ArrayBuffer, n: number, transient: boolean): Buffer {
    const at = layout(n);
    new Int16Array(heap, at.inPtr, SPAN).set(this.history);
    const total = this.inCount + n;
    // Output m reads input samples up to floor(3m / 2): those this chunk completes.
    const end = Math.floor((2 * total - 1) / DOWN) + 1;
    const count = Math.max(0, end - this.outCount);
    // Positions relative to this chunk (small numbers however long the session): with
    // m = parity + 2q + o, floor(3m / 2) - base = floor(3(parity + o) / 2) - (base - 3q).
    const parity = this.outCount & 1;
    const q = (this.outCount - parity) / 2;
    k.run(at.inPtr, at.oPtr, parity, this.inCount - SPAN - 3 * q, count);
    this.history.set(new Int16Array(heap, at.inPtr + n * 2, SPAN));
    this.outCount += count;
    this.inCount = total;
    const out = Buffer.from(heap, at.oPtr, count * 2);
    return transient ? out : Buffer.from(out);
  }
}
