// AudioWorklet: microphone samples at the context's rate (44.1 or 48 kHz,
// whatever the device runs at) in, 16 kHz mono PCM16LE frames of 100 ms
// (1600 samples, 3200 bytes) out to the page. Resampling is a windowed-sinc
// low-pass (cut at 7.2 kHz, Hann window, ZEROS zero crossings a side)
// evaluated at each output sample's exact, fractional input position, carried
// across render quanta. The box filter it replaces (an average of the 2 or 3
// input samples under each output sample) jittered by up to one input sample
// at 44.1 kHz and let high frequencies through folded: Chromium's fake
// microphone runs at 44.1 kHz, and jfk.wav through it lost half its words
// (test/surface/playground-mic.test.ts).
const OUT_RATE = 16000;
const FRAME_SAMPLES = 1600;
const ZEROS = 12;
const CUTOFF = 0.9; // of the output's Nyquist frequency

class Pcm16Resampler extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / OUT_RATE; // input samples per output sample
    this.fc = (CUTOFF * 0.5) / this.step; // cut-off, cycles per input sample
    this.half = Math.ceil(ZEROS / (2 * this.fc)); // filter half-width, input samples
    this.buf = new Float32Array(this.half); // history (silence before the first sample)
    this.t = this.half; // the next output sample's position in buf
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.filled = 0;
  }

  /** The low-pass's weight `d` input samples from an output sample's position. */
  weight(d) {
    if (Math.abs(d) >= this.half) return 0;
    const x = 2 * this.fc * d;
    const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
    return 2 * this.fc * sinc * (0.5 + 0.5 * Math.cos((Math.PI * d) / this.half));
  }

  emit(v) {
    const s = Math.max(-1, Math.min(1, v));
    this.frame[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
    if (this.filled === FRAME_SAMPLES) {
      this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
      this.frame = new Int16Array(FRAME_SAMPLES);
      this.filled = 0;
    }
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    // Mix down to mono after what is kept of the previous quanta.
    const n = channels[0].length;
    const buf = new Float32Array(this.buf.length + n);
    buf.set(this.buf);
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (const ch of channels) s += ch[i];
      buf[this.buf.length + i] = s / channels.length;
    }
    if (this.step === 1) {
      for (let i = this.buf.length; i < buf.length; i++) this.emit(buf[i]);
      this.buf = new Float32Array(0);
      return true;
    }
    let t = this.t;
    while (t + this.half < buf.length) {
      let sum = 0;
      let norm = 0;
      for (let j = Math.ceil(t - this.half); j <= Math.floor(t + this.half); j++) {
        const w = this.weight(t - j);
        sum += buf[j] * w;
        norm += w;
      }
      this.emit(sum / norm);
      t += this.step;
    }
    const keep = Math.max(0, Math.floor(t - this.half));
    this.buf = buf.slice(keep);
    this.t = t - keep;
    return true;
  }
}

registerProcessor('pcm16-resampler', Pcm16Resampler);
