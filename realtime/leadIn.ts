/**
 * Where a session's audio starts for the VAD (issue 21): the words of a clip
 * must not depend on how much silence the client sent before it (the
 * interface tells clients to send zero samples to stay connected). The VAD
 * classifies 32 ms windows counted from the first sample it is given, and the
 * engine frames each utterance from where it was cut; a lead-in of any length
 * other than a multiple of both shifts every window and frame against the
 * speech, and PocketSphinx's words with them (jfk.wav: 5% WER after 300 ms,
 * 73% after 500 ms).
 *
 * So the VAD's view of a session begins `prefixMs` before its first audible
 * sample (above the VAD's energy gate): until then audio is held back, only
 * the last `prefixMs` kept, and zeros fill in when less came before. Any
 * lead-in of silence or a faint noise floor then gives the VAD the same
 * audio, and so the same cuts and words. Positions the VAD reports are moved
 * back onto the session's own timeline with `toSessionMs`.
 */
/** The engine's frame shift at 16 kHz (10 ms): the view starts on this grid of the session's samples. */
const GRID = 160;

export class LeadIn {
  /** Samples the session had received before the VAD's first sample (negative: zeros were put in front). */
  private offsetSamples = 0;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private receivedSamples = 0;
  private started = false;
  private readonly gate: number;
  private readonly prefixBytes: number;
  private readonly samplesPerMs: number;
  private readonly holdBytes: number;

  /** `enabled` false (the session's VAD is off: every sample belongs to an utterance): audio passes as is. */
  constructor(opts: { gateDbfs: number; prefixMs: number; sampleRate: number; enabled?: boolean }) {
    this.started = opts.enabled === false;
    this.gate = Math.round(32768 * 10 ** (opts.gateDbfs / 20));
    this.prefixBytes = Math.round((opts.prefixMs * opts.sampleRate) / 1000) * 2;
    this.holdBytes = this.prefixBytes + GRID * 2;
    this.samplesPerMs = opts.sampleRate / 1000;
  }

  /** The audio to give the VAD now (empty while the lead-in lasts). */
  push(buf: Buffer): Buffer {
    if (this.started) return buf;
    const n = buf.length >> 1;
    let first = -1;
    for (let i = 0; i < n; i++) {
      const x = buf.readInt16LE(i * 2);
      if (x > this.gate || x < -this.gate) {
        first = i;
        break;
      }
    }
    if (first < 0) {
      this.hold(buf);
      this.receivedSamples += n;
      return Buffer.alloc(0);
    }
    this.hold(buf.subarray(0, first * 2));
    // The view starts on the session's own 10 ms grid, so utterances are framed as the clip is.
    const at = this.receivedSamples + first;
    const keep = this.prefixBytes / 2 + (((at % GRID) + GRID) % GRID);
    const held = Buffer.concat(this.held);
    const before = held.subarray(Math.max(0, held.length - keep * 2));
    const pad = Buffer.alloc(Math.max(0, keep * 2 - before.length));
    this.offsetSamples = at - keep;
    this.started = true;
    this.held = [];
    this.heldBytes = 0;
    return Buffer.concat([pad, before, buf.subarray(first * 2)]);
  }

  /** A VAD position in samples on the session's timeline (for the engine's frame grid). */
  toSessionSamples(vadSamples: number): number {
    return vadSamples + this.offsetSamples;
  }

  /** A VAD position (ms from its first sample) on the session's timeline (ms from the session's first sample). */
  toSessionMs(vadMs: number): number {
    return Math.max(0, Math.round(vadMs + this.offsetSamples / this.samplesPerMs));
  }

  /** Only the last `prefixMs` (and a grid step) of the lead-in are kept. */
  private hold(view: Buffer): void {
    if (view.length === 0) return;
    // A copy: the caller's buffer may be a view on memory it reuses.
    const buf = Buffer.from(view);
    this.held.push(buf);
    this.heldBytes += buf.length;
    while (this.held.length > 1 && this.heldBytes - this.held[0].length >= this.holdBytes) {
      this.heldBytes -= this.held.shift()!.length;
    }
    if (this.heldBytes > this.holdBytes) {
      const joined = Buffer.concat(this.held);
      this.held = [joined.subarray(joined.length - this.holdBytes)];
      this.heldBytes = this.holdBytes;
    }
  }
}
