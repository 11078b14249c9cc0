/**
 * Whether two stretches of a recording sound like the same voice through the
 * same channel, for the batch plane's utterance pieces (shared/audio/slicing.ts,
 * docs/decisions/speech.md). PocketSphinx normalises each call's cepstra by
 * their mean over the call: a longer piece gives a steadier mean (one-voice
 * long-form audio loses 3 points in 5 s pieces against 10 s ones), but a
 * piece that spans two speakers normalises both with a mean that fits
 * neither (the recorded speakers' montage loses 8 points in 10 s pieces).
 *
 * The signature of a stretch is its long-term spectral shape: the mean of
 * 20 mel-spaced band levels (100 Hz to 7 kHz, dB) over its louder half of
 * 32 ms frames, less their average (so loudness does not count). Stretches
 * are "the same channel" when their shapes differ by less than `maxDb` (RMS
 * over the bands). Measured 2026-11-26: phrases of one voice differ by 3 dB
 * (median; 7 at most on the long-form files), different recorded speakers by
 * 8 dB or more.
 */
const N = 512;
const HOP = 256;
const BANDS = 20;
const RATE = 16000;

const mel = (f: number): number => 2595 * Math.log10(1 + f / 700);
const hz = (m: number): number => 700 * (10 ** (m / 2595) - 1);
const EDGES = Array.from({ length: BANDS + 1 }, (_, i) =>
  Math.round((hz(mel(100) + ((mel(7000) - mel(100)) * i) / BANDS) / RATE) * N),
);
const WINDOW = Float64Array.from({ length: N }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / (N - 1)));

const COS = Float64Array.from({ length: N / 2 }, (_, k) => Math.cos((-2 * Math.PI * k) / N));
const SIN = Float64Array.from({ length: N / 2 }, (_, k) => Math.sin((-2 * Math.PI * k) / N));

/** In-place radix-2 FFT; returns the power spectrum's first N/2 bins. */
function power(re: Float64Array, im: Float64Array): Float64Array {
  for (let i = 1, j = 0; i < N; i++) {
    let bit = N >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) [re[i], re[j]] = [re[j], re[i]];
  }
  for (let len = 2; len <= N; len <<= 1) {
    const stride = N / len;
    for (let i = 0; i < N; i += len)
      for (let k = 0; k < len / 2; k++) {
        const wr = COS[k * stride];
        const wi = SIN[k * stride];
        const a = i + k;
        const b = a + len / 2;
        const vr = re[b] * wr - im[b] * wi;
        const vi = re[b] * wi + im[b] * wr;
        re[b] = re[a] - vr;
        im[b] = im[a] - vi;
        re[a] += vr;
        im[a] += vi;
      }
  }
  const out = new Float64Array(N / 2);
  for (let k = 0; k < N / 2; k++) out[k] = re[k] * re[k] + im[k] * im[k];
  return out;
}

/** Band levels of every 32 ms frame (16 ms apart) of one chunk's PCM16LE mono 16 kHz, computed once. */
export class ChannelSignatures {
  private readonly levels: Float32Array;
  private readonly loudness: Float32Array;
  readonly frames: number;

  private constructor(samples: number) {
    this.frames = Math.max(0, Math.floor((samples - N) / HOP) + 1);
    this.levels = new Float32Array(this.frames * BANDS);
    this.loudness = new Float32Array(this.frames);
  }

  /** Computed in turns of `framesPerTurn` frames (about 15 ms of work each: the event loop is not held), about 0.8 s per 300 s. */
  static async of(pcm: Buffer, framesPerTurn = 400): Promise<ChannelSignatures> {
    const sig = new ChannelSignatures(pcm.length >> 1);
    for (let f = 0; f < sig.frames; f += framesPerTurn) {
      sig.compute(pcm, f, Math.min(sig.frames, f + framesPerTurn));
      await new Promise((r) => setImmediate(r));
    }
    return sig;
  }

  private compute(pcm: Buffer, from: number, to: number): void {
    const re = new Float64Array(N);
    const im = new Float64Array(N);
    for (let f = from; f < to; f++) {
      for (let i = 0; i < N; i++) re[i] = pcm.readInt16LE((f * HOP + i) * 2) * WINDOW[i];
      im.fill(0);
      const p = power(re, im);
      let total = 0;
      for (let b = 0; b < BANDS; b++) {
        let e = 1e-3;
        for (let k = EDGES[b]; k < Math.max(EDGES[b] + 1, EDGES[b + 1]); k++) e += p[k];
        const db = 10 * Math.log10(e);
        this.levels[f * BANDS + b] = db;
        total += db;
      }
      this.loudness[f] = total;
    }
  }

  /** The spectral shape of [start, end) seconds (null: too short to tell). */
  shape(start: number, end: number): Float64Array | null {
    const a = Math.max(0, Math.ceil((start * RATE) / HOP));
    const b = Math.min(this.frames, Math.floor((end * RATE - N) / HOP) + 1);
    if (b - a < 8) return null;
    const loud = Array.from(this.loudness.subarray(a, b)).sort((x, y) => x - y);
    const median = loud[Math.floor(loud.length / 2)];
    const mean = new Float64Array(BANDS);
    let n = 0;
    for (let f = a; f < b; f++) {
      if (this.loudness[f] < median) continue;
      for (let k = 0; k < BANDS; k++) mean[k] += this.levels[f * BANDS + k];
      n++;
    }
    let avg = 0;
    for (let k = 0; k < BANDS; k++) avg += (mean[k] /= n) / BANDS;
    for (let k = 0; k < BANDS; k++) mean[k] -= avg;
    return mean;
  }

  /** RMS difference (dB) of the two stretches' shapes; null when either is too short to tell. */
  distance(a: [number, number], b: [number, number]): number | null {
    const x = this.shape(a[0], a[1]);
    const y = this.shape(b[0], b[1]);
    if (!x || !y) return null;
    let d = 0;
    for (let k = 0; k < BANDS; k++) d += (x[k] - y[k]) ** 2;
    return Math.sqrt(d / BANDS);
  }

  /** Same voice and channel: shapes within `maxDb` (unknown counts as different). */
  same(a: [number, number], b: [number, number], maxDb: number): boolean {
    const d = this.distance(a, b);
    return d !== null && d < maxDb;
  }
}
