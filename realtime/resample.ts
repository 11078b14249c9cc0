/**
 * The client's PCM16LE at 24 kHz (OpenAI's `audio/pcm`, `pcm16`) to the
 * 16 kHz the VAD and the engines read, once, as the audio arrives: a
 * polyphase FIR (up 2, low-pass at 7.2 kHz, down 3; 48 taps, Blackman
 * windowed sinc), with its state carried from frame to frame so the result
 * does not depend on how the audio was cut into frames. Its delay (about
 * 0.5 ms) is far below anything reported in whole milliseconds.
 */

const UP = 2;
const DOWN = 3;
const TAPS = 48;
/** Input samples one output sample reads. */
const SPAN = TAPS / UP;

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

/** The filter split by phase: output m reads input samples floor(3m/2) - k with taps PHASES[m % 2][k]. */
const PHASES = [0, 1].map((p) => {
  const taps = new Float64Array(SPAN);
  for (let k = 0; k < SPAN; k++) taps[k] = p + UP * k < TAPS ? LOWPASS_48K[p + UP * k] : 0;
  return taps;
});

export class Resampler24To16 {
  /**
   * The last SPAN input samples, then the current chunk's; grown to the largest chunk seen and
   * reused (an idle session holds only the SPAN samples of history).
   */
  private x = new Float64Array(SPAN);
  /** Input samples consumed so far, and output samples produced. */
  private inCount = 0;
  private outCount = 0;

  /** Converts one chunk (whole samples); returns the 16 kHz samples it completes. */
  push(chunk: Buffer): Buffer {
    const n = chunk.length >> 1;
    if (this.x.length < SPAN + n) {
      const grown = new Float64Array(SPAN + n);
      grown.set(this.x.subarray(0, SPAN));
      this.x = grown;
    }
    const x = this.x;
    // x[j] is input sample (inCount - SPAN + j); the chunk's samples read through an aligned view.
    const pcm =
      chunk.byteOffset % 2 === 0
        ? new Int16Array(chunk.buffer, chunk.byteOffset, n)
        : new Int16Array(Uint8Array.from(chunk).buffer, 0, n);
    for (let i = 0; i < n; i++) x[SPAN + i] = pcm[i];
    const base = this.inCount - SPAN;
    const total = this.inCount + n;
    // Output m reads input samples up to floor(3m / 2): those this chunk completes.
    const end = Math.floor((2 * total - 1) / DOWN) + 1;
    const count = Math.max(0, end - this.outCount);
    const out = new Int16Array(count);
    for (let o = 0; o < count; o++) {
      const m = this.outCount + o;
      const taps = PHASES[m & 1];
      const last = ((DOWN * m) >> 1) - base; // index in x of the newest sample it reads
      // SPAN (24) taps, four at a time: V8 keeps the sums in registers.
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      for (let k = 0; k < SPAN; k += 4) {
        a0 += taps[k] * x[last - k];
        a1 += taps[k + 1] * x[last - k - 1];
        a2 += taps[k + 2] * x[last - k - 2];
        a3 += taps[k + 3] * x[last - k - 3];
      }
      const acc = a0 + a1 + a2 + a3;
      const v = Math.round(acc);
      out[o] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    }
    this.outCount += count;
    this.inCount = total;
    x.copyWithin(0, n, n + SPAN);
    return Buffer.from(out.buffer, 0, count * 2);
  }
}
