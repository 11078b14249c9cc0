/**
 * Turns a PCM16LE 16 kHz stream into utterances. Audio is cut into 32 ms
 * windows; each window gets a speech flag (speechFlags.ts: silero, with an
 * energy gate so that silent streams cost almost nothing).
 *
 * Policy (all lengths are rounded to whole windows):
 * - an utterance opens once `minSpeechMs` of speech windows have been heard
 *   (before `silenceMs`, or the longer `candidateGapMs`, of silence breaks
 *   the candidate; soft windows, above silero's exit threshold, count once
 *   the model has said speech: speechFlags.ts); it carries `prefixMs` of
 *   audio from before the onset;
 * - it ends after `silenceMs` of silence (reason `end_of_speech`), keeping at
 *   most `prefixMs` of that silence as trailing padding;
 * - with `sentenceEndSilenceMs` (shorter than `silenceMs`) and `streamAudio`,
 *   a pause that long is put to the owner (`pause` event, numbered, with the
 *   prosody of the phrase before it and the speaker's recent pauses): the
 *   segmenter waits, queueing audio, until `verdict(n, ms)` says after how
 *   much silence the utterance ends (reason `end_of_speech`; at once when the
 *   pause is already that long, e.g. the words so far read as a finished
 *   sentence; `silenceMs` at the latest); speech before then goes on. Waiting
 *   makes the cut depend on the audio only, not on how fast it arrives or how
 *   fast the verdict comes. Without `streamAudio`, with an eagerness,
 *   `unjudgedSilenceMs` (when set) is the window;
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
import { WINDOW_SAMPLES, SAMPLE_RATE, type ClassifierSource } from './vad.js';
import { SpeechFlags, WAIT } from './speechFlags.js';
import { phraseEnd } from './prosody.js';

export const WINDOW_BYTES = WINDOW_SAMPLES * 2;
export const WINDOW_MS = (WINDOW_SAMPLES / SAMPLE_RATE) * 1000;

/** How speech is cut into utterances: defined with the settings that configure it. */
export type { SegmenterSettings };
import type { SegmenterSettings } from '../../shared/config/realtime.js';

export type { SegmenterEvent, SegmenterOptions, StopReason } from './segmenterTypes.js';
import type { SegmenterEvent, SegmenterOptions, StopReason } from './segmenterTypes.js';

/** A pause that ends an utterance past its target length. */
const TARGET_PAUSE_MS = 160;

const EMPTY = Buffer.alloc(0);
const ms2w = (ms: number): number => Math.max(0, Math.round(ms / WINDOW_MS));
/** Pauses inside utterances (speech went on) shorter than this are not the speaker's pauses; the last few are kept. */
const SPEAKER_PAUSE_W = 3;
const SPEAKER_PAUSES = 8;

interface Win {
  pcm: Buffer;
  rms: number;
  speech: boolean;
}

export class Segmenter {
  private settings!: SegmenterSettings;
  private silenceW = 0;
  /** Silence that breaks a candidate: at least `silenceW`. */
  private candidateGapW = 0;
  private readonly candidateGapMs: number;
  private prefixW = 0;
  private minSpeechW = 0;
  private targetW = 0;
  private maxW = 0;
  private smartW = 0;
  /** Windows of silence after which a pause is announced (0: never). */
  private sentenceEndW = 0;
  /** Number of the last pause put to the owner, and the one awaiting its verdict (0: none). */
  private pauseSeq = 0;
  private judgingPause = 0;
  /** The verdict's silence (windows) after which the open utterance ends (0: the window's). */
  private endAtW = 0;
  /** The speaker's last pauses inside utterances (windows): how long they pause and go on. */
  private readonly speakerPauses: number[] = [];
  /** A flush waits behind the queued audio: no pause is put to the owner until it is applied. */
  private pausesHeld = false;
  private readonly streamAudio: boolean;
  /** Windows of the open utterance already sent out in `audio` events. */
  private fed = 0;
  /** Window waiting for a batched model call. */
  private awaiting: Win | null = null;

  private remainder: Buffer = EMPTY;
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
  /** Speech flags per window (the model, its gate and hold). */
  private readonly flags: SpeechFlags;

  constructor(settings: SegmenterSettings, source: ClassifierSource | null, opts: SegmenterOptions) {
    this.flags = new SpeechFlags(source, opts, WINDOW_MS);
    this.streamAudio = opts.streamAudio ?? false;
    this.candidateGapMs = opts.candidateGapMs ?? 0;
    this.configure(settings);
  }

  /** New settings apply from the next window on (an open utterance keeps its audio). */
  configure(s: SegmenterSettings): void {
    this.assertNotBlocked();
    this.settings = { ...s };
    this.silenceW = Math.max(1, ms2w(s.silenceMs));
    this.candidateGapW = Math.max(this.silenceW, ms2w(this.candidateGapMs));
    this.prefixW = ms2w(s.prefixMs);
    this.minSpeechW = Math.max(1, ms2w(s.minSpeechMs));
    this.maxW = Math.max(1, ms2w(s.maxSpeechMs));
    this.targetW = Math.min(this.maxW, Math.max(1, ms2w(s.targetSpeechMs)));
    this.smartW = Math.min(this.maxW - 1, ms2w(s.smartSplitWindowMs));
    const early = s.sentenceEndSilenceMs ? Math.max(1, ms2w(s.sentenceEndSilenceMs)) : 0;
    this.sentenceEndW = this.streamAudio && early < this.silenceW ? early : 0;
    // Pauses nobody judges (no streaming decoder): the window for that case.
    if (!this.sentenceEndW && early && s.eagerness && s.unjudgedSilenceMs)
      this.silenceW = Math.max(1, ms2w(s.unjudgedSilenceMs));
    this.flags.setThreshold(s.threshold);
  }

  get inSpeech(): boolean {
    return this.open;
  }

  /** Bytes held for the open utterance (or candidate). */
  get pendingBytes(): number {
    return this.cur.length * WINDOW_BYTES + (this.open ? this.remainder.length : 0);
  }

  get holdsModel(): boolean {
    return this.flags.holdsModel;
  }

  /**
   * A window waits for a batched model call (a deferred classifier, vad.ts):
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
    if (!this.awaiting && !this.judgingPause) this.advance(out);
    return out;
  }

  /** The model has run; finishes the waiting window and goes on with queued audio. */
  resume(): SegmenterEvent[] {
    const out: SegmenterEvent[] = [];
    const w = this.awaiting;
    if (!w) return out;
    this.awaiting = null;
    // The classifier may have been handed back meanwhile only by close(); then nothing follows.
    const speech = this.flags.answer(w.rms);
    if (speech === null) return out;
    w.speech = speech;
    this.afterClassify(w, out);
    this.advance(out);
    return out;
  }

  /** Windows of the queued audio, until one has to wait for the model. */
  private advance(out: SegmenterEvent[]): void {
    const buf = this.remainder;
    let off = 0;
    while (!this.judgingPause && buf.length - off >= WINDOW_BYTES) {
      const pcm = buf.subarray(off, off + WINDOW_BYTES);
      off += WINDOW_BYTES;
      const w: Win = { pcm, rms: this.flags.rmsOf(pcm), speech: false };
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
    if (this.judgingPause) throw new Error('segmenter: a pause is waiting for its verdict');
    if (this.awaiting) throw new Error('segmenter: a window is waiting for the model (resume() first)');
  }

  flush(): SegmenterEvent[] {
    this.assertNotBlocked();
    this.pausesHeld = false;
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

  /** A pause waits for its verdict (`verdict()`): audio is queued, `flush` and `configure` must wait. */
  get judging(): boolean {
    return this.judgingPause !== 0;
  }

  /**
   * The owner's answer for pause `pause`: the silence (ms) after which the
   * utterance ends (now when the pause is that long already; the window when
   * longer); then the queued audio is processed. An answer for any other
   * pause is ignored.
   */
  verdict(pause: number, endAfterMs: number): SegmenterEvent[] {
    const out: SegmenterEvent[] = [];
    if (pause !== this.judgingPause) return out;
    this.judgingPause = 0;
    const w = Math.max(1, Math.round(endAfterMs / WINDOW_MS));
    if (this.open && w <= this.silenceRun) this.finish('end_of_speech', this.paddedEnd(), out);
    else if (this.open && w < this.silenceW) this.endAtW = w;
    if (!this.awaiting) this.advance(out);
    return out;
  }

  /**
   * A closing session's flush is queued behind audio (rounds.ts): it ends the utterance with
   * everything received before it without waiting for the verdict of the pause being judged (that
   * pause goes on) or for pauses in the audio ahead of it, which are not put until the flush. A
   * client's flush does wait, so its cuts depend on the audio alone.
   */
  flushWaiting(): SegmenterEvent[] {
    this.pausesHeld = true;
    return this.judgingPause ? this.verdict(this.judgingPause, Infinity) : [];
  }

  /** Release the model (session closed). */
  close(): void {
    this.awaiting = null;
    this.judgingPause = 0;
    this.remainder = EMPTY;
    this.flags.release();
    this.cur = [];
    this.prefix = [];
  }

  private classify(w: Win): boolean | typeof WAIT {
    if (!this.settings.vad) {
      this.flags.windows++;
      return true;
    }
    return this.flags.classify(w.rms, {
      idle: !this.open && this.cur.length === 0,
      open: this.open,
      threshold: this.settings.threshold,
    });
  }

  /** Model invocations and windows seen, for measurements. */
  get modelCalls(): number {
    return this.flags.modelCalls;
  }

  get windows(): number {
    return this.flags.windows;
  }

  /** Adds a classified window to the current candidate or utterance, counting speech and the silence run. */
  private addToCurrent(w: Win): void {
    this.cur.push(w);
    if (w.speech) {
      this.speechW++;
      if (this.open && this.silenceRun >= SPEAKER_PAUSE_W) {
        this.speakerPauses.push(this.silenceRun);
        if (this.speakerPauses.length > SPEAKER_PAUSES) this.speakerPauses.shift();
      }
      this.silenceRun = 0;
      this.endAtW = 0;
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
      if (this.silenceRun >= this.candidateGapW) {
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
    if (this.silenceRun >= this.silenceW || (this.endAtW > 0 && this.silenceRun >= this.endAtW)) {
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
    if (!this.open) return;
    this.emitAudio(Math.min(this.paddedEnd(), this.maxW - this.smartW), out);
    // After the audio: whoever judges the pause has been given all the speech before it.
    if (
      this.streamAudio &&
      this.sentenceEndW > 0 &&
      this.silenceRun === this.sentenceEndW &&
      !this.pausesHeld
    ) {
      this.judgingPause = ++this.pauseSeq;
      out.push({
        type: 'pause',
        pause: this.judgingPause,
        silenceMs: Math.round(this.silenceRun * WINDOW_MS),
        atMs: Math.round((this.curStartPos + this.lastSpeechIdx + 1) * WINDOW_MS),
        speakerPauseMs: Math.round(Math.max(0, ...this.speakerPauses) * WINDOW_MS),
        prosody: phraseEnd(this.cur, this.lastSpeechIdx),
      });
    }
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
    this.endAtW = 0;
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
