/**
 * Turns a PCM16LE 16 kHz stream into utterances. Audio is cut into 32 ms
 * windows; each window gets a speech flag from a classifier (silero), except
 * that while no speech is open a window below the energy gate is silence
 * without asking the model, so silent streams cost almost nothing.
 *
 * Policy (all lengths are rounded to whole windows):
 * - an utterance opens once `minSpeechMs` of speech windows have been heard
 *   (before `silenceMs` of silence breaks the candidate); it carries
 *   `prefixMs` of audio from before the onset;
 * - it ends after `silenceMs` of silence (reason `end_of_speech`), keeping at
 *   most `prefixMs` of that silence as trailing padding;
 * - past `targetSpeechMs` it ends at the next short pause (reason
 *   `target_duration`);
 * - at `maxSpeechMs` it is cut hard (reason `max_duration`): at the quietest
 *   window of the last `smartSplitWindowMs`, or exactly at the limit when that
 *   is 0; the audio after the cut opens the next utterance at once;
 * - `flush()` ends whatever is open (reason `flush`), including a candidate
 *   shorter than `minSpeechMs` and, with VAD off, all audio since the last cut.
 * - with `vad` off every window counts as speech: only flush and the maximum
 *   length end an utterance.
 *
 * With `streamAudio`, an open utterance's audio also comes out while it is
 * spoken (`audio` events between its `start` and `stop`), for engines that
 * decode incrementally. A window comes out once it is sure to belong to the
 * utterance: silence after the last speech only up to the trailing padding,
 * and nothing past `maxSpeechMs - smartSplitWindowMs` (a hard cut may fall
 * there). The `audio` events of an utterance add up to its `stop` pcm.
 */
import {
  WINDOW_SAMPLES,
  SAMPLE_RATE,
  isDeferred,
  type Classifier,
  type DeferredClassifier,
} from './silero.js';

export const WINDOW_BYTES = WINDOW_SAMPLES * 2;
export const WINDOW_MS = (WINDOW_SAMPLES / SAMPLE_RATE) * 1000;

/** How speech is cut into utterances: defined with the settings that configure it. */
export type { SegmenterSettings };
import type { SegmenterSettings } from '../../shared/config/realtime.js';

export type { ClassifierSource, SegmenterEvent, SegmenterOptions, StopReason } from './segmenterTypes.js';
import type { ClassifierSource, SegmenterEvent, SegmenterOptions, StopReason } from './segmenterTypes.js';

/** Fallback speech test when no model is available: this many dB above the gate. */
const ENERGY_FALLBACK_MARGIN_DB = 15;
/** A pause that ends an utterance past its target length. */
const TARGET_PAUSE_MS = 160;

const EMPTY = Buffer.alloc(0);
/** classify(): the window waits for a batched model call. */
const WAIT = Symbol('wait');
const ms2w = (ms: number): number => Math.max(0, Math.round(ms / WINDOW_MS));

interface Win {
  pcm: Buffer;
  rms: number;
  speech: boolean;
}

export class Segmenter {
  private settings!: SegmenterSettings;
  private silenceW = 0;
  private prefixW = 0;
  private minSpeechW = 0;
  private targetW = 0;
  private maxW = 0;
  private smartW = 0;
  private readonly gateRms: number;
  private readonly fallbackRms: number;
  private readonly releaseAfterW: number;
  private readonly streamAudio: boolean;
  /** Windows of the open utterance already sent out in `audio` events. */
  private fed = 0;
  /** Window waiting for a batched model call. */
  private awaiting: Win | null = null;

  private remainder: Buffer = EMPTY;
  private readonly scratch = new Float32Array(WINDOW_SAMPLES);
  /** Windows heard since the stream began (position clock). */
  private pos = 0;
  private prefix: Win[] = [];
  /** Candidate (not yet announced) or open utterance windows. */
  private cur: Win[] = [];
  private curStartPos = 0;
  private open = false;
  private speechW = 0;
  private silenceRun = 0;
  private lastSpeechIdx = -1;
  private classifier: Classifier | null = null;
  private classifierThreshold = -1;
  private gatedRun = 0;
  private readonly holdRatio: number;
  private readonly maxSkip: number;
  private skipped = 0;
  private lastModelSpeech = false;
  /** Running estimate of the background level (RMS), from windows judged silent. */
  private noiseFloor = 0;
  /** Model invocations and windows seen, for measurements. */
  modelCalls = 0;
  windows = 0;

  constructor(
    settings: SegmenterSettings,
    private readonly source: ClassifierSource | null,
    opts: SegmenterOptions,
  ) {
    this.gateRms = Math.pow(10, opts.gateDbfs / 20);
    this.fallbackRms = Math.pow(10, (opts.gateDbfs + ENERGY_FALLBACK_MARGIN_DB) / 20);
    this.releaseAfterW = ms2w(opts.releaseAfterMs);
    this.holdRatio = opts.holdDb ? Math.pow(10, opts.holdDb / 20) : 0;
    this.maxSkip = opts.maxSkip ?? 0;
    this.streamAudio = opts.streamAudio ?? false;
    this.configure(settings);
  }

  /** New settings apply from the next window on (an open utterance keeps its audio). */
  configure(s: SegmenterSettings): void {
    this.assertNotBlocked();
    this.settings = { ...s };
    this.silenceW = Math.max(1, ms2w(s.silenceMs));
    this.prefixW = ms2w(s.prefixMs);
    this.minSpeechW = Math.max(1, ms2w(s.minSpeechMs));
    this.maxW = Math.max(1, ms2w(s.maxSpeechMs));
    this.targetW = Math.min(this.maxW, Math.max(1, ms2w(s.targetSpeechMs)));
    this.smartW = Math.min(this.maxW - 1, ms2w(s.smartSplitWindowMs));
    if (this.classifier && this.classifierThreshold !== s.threshold) this.dropClassifier();
  }

  get inSpeech(): boolean {
    return this.open;
  }

  /** Bytes held for the open utterance (or candidate). */
  get pendingBytes(): number {
    return this.cur.length * WINDOW_BYTES + (this.open ? this.remainder.length : 0);
  }

  get holdsModel(): boolean {
    return this.classifier !== null;
  }

  /**
   * A window waits for a batched model call (a deferred classifier, silero.ts):
   * until the owner has run the model and called `resume()` (rounds.ts does),
   * `push` only queues audio, and `flush` and `configure` must not be called.
   */
  get blocked(): boolean {
    return this.awaiting !== null;
  }

  /** Feed PCM16LE bytes (any even length). */
  push(pcm: Buffer): SegmenterEvent[] {
    const out: SegmenterEvent[] = [];
    // One copy per frame (the caller's buffer, a uWS ArrayBuffer, is only valid during the call);
    // windows are views into it.
    this.remainder = this.remainder.length > 0 ? Buffer.concat([this.remainder, pcm]) : Buffer.from(pcm);
    if (!this.awaiting) this.advance(out);
    return out;
  }

  /** The model has run; finishes the waiting window and goes on with queued audio. */
  resume(): SegmenterEvent[] {
    const out: SegmenterEvent[] = [];
    const w = this.awaiting;
    if (!w) return out;
    this.awaiting = null;
    // The classifier may have been handed back meanwhile only by close(); then nothing follows.
    const c = this.classifier as DeferredClassifier | null;
    if (!c) return out;
    this.afterModel(w, c.take());
    this.afterClassify(w, out);
    this.advance(out);
    return out;
  }

  /** Windows of the queued audio, until one has to wait for the model. */
  private advance(out: SegmenterEvent[]): void {
    const buf = this.remainder;
    let off = 0;
    while (buf.length - off >= WINDOW_BYTES) {
      const pcm = buf.subarray(off, off + WINDOW_BYTES);
      off += WINDOW_BYTES;
      const w: Win = { pcm, rms: this.rmsOf(pcm), speech: false };
      const speech = this.classify(w);
      if (speech === WAIT) {
        this.awaiting = w;
        break;
      }
      w.speech = speech;
      this.afterClassify(w, out);
    }
    this.remainder = off < buf.length ? buf.subarray(off) : EMPTY;
  }

  private assertNotBlocked(): void {
    if (this.awaiting) throw new Error('segmenter: a window is waiting for the model (resume() first)');
  }

  flush(): SegmenterEvent[] {
    this.assertNotBlocked();
    const out: SegmenterEvent[] = [];
    const tail = this.remainder;
    this.remainder = EMPTY;
    if (!this.open) {
      const hasSpeech =
        this.cur.some((w) => w.speech) || (!this.settings.vad && (this.cur.length > 0 || tail.length > 0));
      if (!hasSpeech) {
        if (tail.length > 0) this.pos += tail.length / WINDOW_BYTES;
        return out;
      }
      this.announce(out);
    }
    this.finish('flush', this.cur.length, out, tail);
    return out;
  }

  /** Release the model (session closed). */
  close(): void {
    this.awaiting = null;
    this.remainder = EMPTY;
    this.dropClassifier();
    this.cur = [];
    this.prefix = [];
  }

  private dropClassifier(): void {
    this.classifier?.release();
    this.classifier = null;
    this.classifierThreshold = -1;
  }

  /** RMS of the window (0..1) and its samples as floats in `scratch` for the model. */
  private rmsOf(w: Buffer): number {
    const n = WINDOW_SAMPLES;
    const s = this.scratch;
    let sum = 0;
    if (w.byteOffset % 2 === 0) {
      const x = new Int16Array(w.buffer, w.byteOffset, n);
      for (let i = 0; i < n; i++) {
        const v = x[i] / 32768;
        s[i] = v;
        sum += v * v;
      }
    } else {
      for (let i = 0; i < n; i++) {
        const v = w.readInt16LE(i * 2) / 32768;
        s[i] = v;
        sum += v * v;
      }
    }
    return Math.sqrt(sum / n);
  }

  private classify(w: Win): boolean | typeof WAIT {
    this.windows++;
    if (!this.settings.vad) return true;
    const idle = !this.open && this.cur.length === 0;
    if (idle && w.rms < this.gateRms) {
      this.gatedRun++;
      this.lastModelSpeech = false;
      this.trackFloor(w.rms);
      if (this.classifier && this.gatedRun >= this.releaseAfterW) this.dropClassifier();
      return false;
    }
    this.gatedRun = 0;
    if (
      this.holdRatio > 0 &&
      this.open &&
      this.lastModelSpeech &&
      this.skipped < this.maxSkip &&
      w.rms >= Math.max(this.gateRms, this.noiseFloor) * this.holdRatio
    ) {
      this.skipped++;
      return true;
    }
    this.skipped = 0;
    if (!this.classifier && this.source) {
      this.classifier = this.source.acquire(this.settings.threshold);
      this.classifierThreshold = this.settings.threshold;
    }
    let speech: boolean;
    if (this.classifier) {
      this.modelCalls++;
      if (isDeferred(this.classifier)) {
        if (!this.classifier.submit(this.scratch)) return WAIT;
        speech = this.classifier.take();
      } else {
        speech = this.classifier.isSpeech(this.scratch);
      }
    } else {
      speech = w.rms >= this.fallbackRms;
    }
    this.afterModel(w, speech);
    return speech;
  }

  private afterModel(w: Win, speech: boolean): void {
    w.speech = speech;
    this.lastModelSpeech = speech;
    if (!speech) this.trackFloor(w.rms);
  }

  private trackFloor(rms: number): void {
    // Fast to fall, slow to rise: a floor, not an average.
    this.noiseFloor =
      this.noiseFloor === 0 || rms < this.noiseFloor ? rms : this.noiseFloor * 0.95 + rms * 0.05;
  }

  /** Adds a classified window to the current candidate or utterance, counting speech and the silence run. */
  private addToCurrent(w: Win): void {
    this.cur.push(w);
    if (w.speech) {
      this.speechW++;
      this.silenceRun = 0;
      this.lastSpeechIdx = this.cur.length - 1;
    } else {
      this.silenceRun++;
    }
  }

  /** The utterance policy for one classified window. */
  private afterClassify(w: Win, out: SegmenterEvent[]): void {
    this.pos++;

    if (!this.open) {
      if (this.cur.length === 0 && !w.speech) {
        this.pushPrefix(w);
        return;
      }
      this.addToCurrent(w);
      if (this.silenceRun >= this.silenceW) {
        // Candidate broken before it reached the minimum speech length.
        const old = this.cur;
        this.resetCur();
        for (const x of old) this.pushPrefix(x);
        return;
      }
      if (this.speechW >= this.minSpeechW || !this.settings.vad) this.announce(out);
      else return;
    } else {
      this.addToCurrent(w);
    }

    // Open utterance: decide whether it ends here.
    if (this.silenceRun >= this.silenceW) {
      this.finish('end_of_speech', this.paddedEnd(), out);
    } else if (
      this.cur.length >= this.targetW &&
      this.silenceRun >= Math.min(this.silenceW, ms2w(TARGET_PAUSE_MS))
    ) {
      this.finish('target_duration', this.paddedEnd(), out);
    } else if (this.cur.length >= this.maxW) {
      let cut = this.cur.length;
      if (this.smartW > 0) {
        let best = this.cur.length - 1;
        for (let i = this.cur.length - 1; i >= this.cur.length - this.smartW; i--) {
          if (this.cur[i].rms < this.cur[best].rms) best = i;
        }
        cut = best + 1;
      }
      this.finish('max_duration', cut, out);
      // Speech goes on: the rest opens the next utterance at once.
      this.announce(out);
    }
    if (this.open) this.emitAudio(Math.min(this.paddedEnd(), this.maxW - this.smartW), out);
  }

  /** `audio` event with the open utterance's windows up to `upTo` not yet sent. */
  private emitAudio(upTo: number, out: SegmenterEvent[], tail?: Buffer): void {
    if (!this.streamAudio) return;
    const parts = this.cur.slice(this.fed, Math.max(this.fed, upTo)).map((w) => w.pcm);
    if (tail && tail.length > 0) parts.push(tail);
    this.fed = Math.max(this.fed, upTo);
    if (parts.length > 0) out.push({ type: 'audio', pcm: Buffer.concat(parts) });
  }

  private paddedEnd(): number {
    return Math.min(this.cur.length, this.lastSpeechIdx + 1 + Math.min(this.prefixW, this.silenceRun));
  }

  private pushPrefix(w: Win): void {
    if (this.prefixW === 0) return;
    this.prefix.push(w);
    if (this.prefix.length > this.prefixW) this.prefix.splice(0, this.prefix.length - this.prefixW);
  }

  private resetCur(): void {
    this.cur = [];
    this.speechW = 0;
    this.silenceRun = 0;
    this.lastSpeechIdx = -1;
  }

  /** Opens the utterance: prefix + candidate windows. */
  private announce(out: SegmenterEvent[]): void {
    const pre = this.prefix;
    this.prefix = [];
    this.cur = [...pre, ...this.cur];
    if (this.lastSpeechIdx >= 0) this.lastSpeechIdx += pre.length;
    this.open = true;
    this.fed = 0;
    this.curStartPos = this.pos - this.cur.length;
    out.push({ type: 'start', audioStartMs: Math.round(this.curStartPos * WINDOW_MS) });
  }

  /** Ends the open utterance after `cut` windows; the rest stays for what follows. */
  private finish(reason: StopReason, cut: number, out: SegmenterEvent[], tail?: Buffer): void {
    this.emitAudio(cut, out, tail);
    const used = this.cur.slice(0, cut);
    const rest = this.cur.slice(cut);
    const parts = used.map((w) => w.pcm);
    if (tail && tail.length > 0) parts.push(tail);
    const pcm = Buffer.concat(parts);
    const speechMs = Math.round(used.reduce((n, w) => n + (w.speech ? 1 : 0), 0) * WINDOW_MS);
    const startMs = Math.round(this.curStartPos * WINDOW_MS);
    out.push({
      type: 'stop',
      reason,
      pcm,
      speechMs,
      audioStartMs: startMs,
      audioEndMs: startMs + Math.round((pcm.length / 2 / SAMPLE_RATE) * 1000),
    });
    if (tail && tail.length > 0) this.pos += tail.length / WINDOW_BYTES;
    this.open = false;
    this.resetCur();
    if (reason === 'max_duration') {
      // Continuation: carried windows stay in the next utterance.
      this.cur = rest;
      for (let i = 0; i < rest.length; i++) {
        if (rest[i].speech) {
          this.speechW++;
          this.lastSpeechIdx = i;
        }
      }
      this.curStartPos = this.pos - rest.length;
      this.prefix = [];
    } else {
      for (const w of rest) this.pushPrefix(w);
    }
  }
}
