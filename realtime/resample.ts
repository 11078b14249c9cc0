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

/** h[k] of the low-pass at the upsampled rate (48 kHz), gain UP. */
const H = (() => {
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

export class Resampler24To16 {
  /** The last SPAN input samples before the current chunk (zeros before the first). */
  private history = new Float64Array(SPAN);
  /** Input samples consumed so far, and output samples produced. */
  private inCount = 0;
  private outCount = 0;

  /** Converts one chunk (whole samples); returns the 16 kHz samples it completes. */
  push(chunk: Buffer): Buffer {
    const n = chunk.length >> 1;
    // x holds the history then the chunk: x[j] is input sample (inCount - SPAN + j).
    const x = new Float64Array(SPAN + n);
    x.set(this.history);
    for (let i = 0; i < n; i++) x[SPAN + i] = chunk.readInt16LE(i * 2);
    const base = this.inCount - SPAN;
    const total = this.inCount + n;
    const out: number[] = [];
    for (;;) {
      const m = this.outCount;
      const t = DOWN * m; // position at 48 kHz
      const last = Math.floor(t / UP); // newest input sample it reads
      if (last >= total) break;
      let acc = 0;
      // y[m] = sum_i h[t - UP*i] x[i], for input samples i with 0 <= t - UP*i < TAPS.
      for (let i = last; i >= 0 && t - UP * i < TAPS; i--) {
        const j = i - base;
        if (j < 0) break;
        acc += H[t - UP * i] * x[j];
      }
      out.push(acc);
      this.outCount++;
    }
    this.inCount = total;
    this.history = x.slice(x.length - SPAN);
    const buf = Buffer.allocUnsafe(out.length * 2);
    for (let k = 0; k < out.length; k++) {
      const v = Math.round(out[k]);
      buf.writeInt16LE(v > 32767 ? 32767 : v < -32768 ? -32768 : v, k * 2);
    }
    return buf;
  }
}
