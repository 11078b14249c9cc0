/**
 * What the voice did just before a pause (turn ends, issue 38): a phrase
 * that ends a sentence usually falls in pitch and loudness over its last
 * syllables; one that goes on stays level or rises. Measured on the open
 * utterance's own windows, only when a pause is judged (a few times per
 * utterance), so the cost is a few hundred microseconds per pause, nothing
 * per window.
 */

/** A 32 ms window of 16 kHz PCM16LE and its RMS (as the segmenter keeps them). */
export interface ProsodyWindow {
  pcm: Buffer;
  rms: number;
  speech: boolean;
}

export interface Prosody {
  /** Pitch of the last voiced windows against the utterance's median, in semitones (negative: it fell). */
  pitchSt: number;
  /** Loudness of the last speech windows against the utterance's median speech window, in dB. */
  energyDb: number;
}

/** Decimated to 8 kHz; lags of 60-400 Hz. */
const MIN_LAG = 20;
const MAX_LAG = 133;
/** Normalised autocorrelation needed to call a window voiced. */
const VOICED = 0.5;
/** The phrase end: the last this many speech windows (about 200 ms). */
const TAIL = 6;
/** At most this many windows before the tail give the utterance's reference (about 1.9 s). */
const BODY = 60;

/** F0 of one window in Hz, or 0 when it is not clearly voiced. */
function pitchOf(pcm: Buffer): number {
  const n = Math.floor(pcm.length / 4);
  const x = new Float32Array(n);
  let mean = 0;
  for (let i = 0; i < n; i++) {
    x[i] = pcm.readInt16LE(i * 4) + pcm.readInt16LE(i * 4 + 2);
    mean += x[i];
  }
  mean /= n;
  let energy = 0;
  for (let i = 0; i < n; i++) {
    x[i] -= mean;
    energy += x[i] * x[i];
  }
  if (energy === 0) return 0;
  let best = 0;
  let bestLag = 0;
  for (let lag = MIN_LAG; lag <= MAX_LAG && lag < n / 2; lag++) {
    let c = 0;
    let e2 = 0;
    for (let i = 0; i + lag < n; i++) {
      c += x[i] * x[i + lag];
      e2 += x[i + lag] * x[i + lag];
    }
    const r = c / Math.sqrt(energy * e2 + 1e-9);
    if (r > best) [best, bestLag] = [r, lag];
  }
  return best >= VOICED ? 8000 / bestLag : 0;
}

const median = (v: number[]): number => {
  if (v.length === 0) return NaN;
  const s = [...v].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

/** Prosody of the phrase that ends at window `lastSpeech` of `windows` (0 / 0 when too short to say). */
export function phraseEnd(windows: readonly ProsodyWindow[], lastSpeech: number): Prosody {
  const speech: ProsodyWindow[] = [];
  for (let i = lastSpeech; i >= 0 && speech.length < TAIL + BODY; i--)
    if (windows[i].speech) speech.push(windows[i]);
  if (speech.length < TAIL + 4) return { pitchSt: 0, energyDb: 0 };
  const tail = speech.slice(0, TAIL);
  const body = speech.slice(TAIL);
  const db = (w: ProsodyWindow) => 20 * Math.log10(w.rms + 1e-9);
  const energyDb = median(tail.map(db)) - median(body.map(db));
  const f0 = (ws: ProsodyWindow[]) => ws.map((w) => pitchOf(w.pcm)).filter((f) => f > 0);
  // The body's pitch from every third window: enough for a median, a third of the cost.
  const tailF0 = f0(tail);
  const bodyF0 = f0(body.filter((_, i) => i % 3 === 0));
  const pitchSt =
    tailF0.length >= 2 && bodyF0.length >= 3 ? 12 * Math.log2(median(tailF0) / median(bodyF0)) : 0;
  return { pitchSt, energyDb };
}
