// AudioWorklet: microphone samples at the context's rate (often 48 kHz) in,
// 16 kHz mono PCM16LE frames of 100 ms (1600 samples, 3200 bytes) out to the
// page. Resampling averages the input over each output sample's span (a box
// filter, enough against aliasing for speech) with a fractional read position
// carried across render quanta.
const OUT_RATE = 16000;
const FRAME_SAMPLES = 1600;

class Pcm16Resampler extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / OUT_RATE; // input samples per output sample
    this.pos = 0; // read position (input samples) into the pending input
    this.pending = new Float32Array(0);
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.filled = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    // Mix down to mono.
    const n = channels[0].length;
    const mono = new Float32Array(this.pending.length + n);
    mono.set(this.pending);
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (const ch of channels) s += ch[i];
      mono[this.pending.length + i] = s / channels.length;
    }
    let pos = this.pos;
    while (pos + this.step <= mono.length) {
      const start = Math.floor(pos);
      const end = Math.min(mono.length, Math.floor(pos + this.step));
      let sum = 0;
      for (let i = start; i < end; i++) sum += mono[i];
      const v = Math.max(-1, Math.min(1, sum / Math.max(1, end - start)));
      this.frame[this.filled++] = v < 0 ? v * 0x8000 : v * 0x7fff;
      if (this.filled === FRAME_SAMPLES) {
        this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
        this.frame = new Int16Array(FRAME_SAMPLES);
        this.filled = 0;
      }
      pos += this.step;
    }
    const keep = Math.floor(pos);
    this.pending = mono.slice(keep);
    this.pos = pos - keep;
    return true;
  }
}

registerProcessor('pcm16-resampler', Pcm16Resampler);
