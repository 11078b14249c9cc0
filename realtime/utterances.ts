/**
 * A session's utterances: audio in (lead-in, VAD), segments out (speech
 * started, stopped, in the order of interface 6.1), each fed to a streaming
 * decoder while it is spoken and handed at its end to ./transcripts.ts, which
 * answers it with exactly one `completed`. Also the accounting the limits are
 * checked against: audio received, dropped, and the bound on utterances in
 * flight. Every utterance that produced `speech_stopped` gets its
 * `completed`, a failed one included (decisions.md).
 */
import type { Logger } from 'pino';
import type { Principal } from '../shared/auth/index.js';
import { PCM_BYTES_PER_SECOND, PCM_SAMPLE_RATE } from '../shared/audio/pcm.js';
import type { SpeechEngine, SpeechStream, StreamingUtterance } from '../shared/stt/types.js';
import type { RealtimeConfig } from '../shared/config/realtime.js';
import type { SegmenterEvent } from './vad/segmenter.js';
import type { VadEvent, VadService, VadStream } from './vad/service.js';
import type { SessionSettings } from './options.js';
import type { CircuitBreaker } from './breaker.js';
import { LeadIn } from './leadIn.js';
import { judgePause, logVerdict, type PauseInfo } from './turnEnd.js';
import { events, type FlushPurpose } from './protocol.js';
import { COMMIT_EMPTY, type SessionEvent, type Throttled } from './wire.js';
import { Transcripts } from './transcripts.js';
import {
  budgetRoom,
  dropReason,
  THROTTLE_EVENT_INTERVAL_MS,
  type CloseKind,
  type SessionState,
} from './closePolicy.js';

export interface UtteranceDeps {
  config: RealtimeConfig;
  engine: SpeechEngine;
  breaker: CircuitBreaker;
  vad: VadService;
  logger: Logger;
  /** Measurement hook: stopped-to-completed time and the engine's own share of it. */
  onCompleted?: (latencyMs: number, engineMs: number) => void;
  /** Every utterance's outcome once: transcribed, failed (reported with an error) or dropped (not started). */
  onUtterance?: (outcome: 'completed' | 'failed' | 'dropped') => void;
}

/** What the tracker needs of its session. */
export interface UtteranceHost {
  readonly sessionId: string;
  readonly principal: Principal;
  /** Window budget left when the session began (seconds). */
  readonly remainingWindowSeconds: number;
  readonly state: SessionState;
  readonly settings: SessionSettings;
  now(): number;
  emit(ev: SessionEvent): void;
  end(kind: CloseKind): void;
  /** A draining session's last work finished: it may close now. */
  finalClose(): void;
}

export class UtteranceTracker {
  private vad: VadStream | null = null;
  /** Where the VAD's view of the session starts (realtime/leadIn.ts). */
  private leadIn: LeadIn | null = null;
  /** The engine's streaming form for this session (null: clip form only). */
  private speech: SpeechStream | null = null;
  /** The open utterance, fed to a streaming decoder while it is spoken (null: clip form at its end). */
  private streaming: StreamingUtterance | null = null;
  /** Mirror of the segmenter's state: an utterance is open. */
  private vadOpen = false;
  /** Flushes sent to the VAD whose `flushed` marker has not come back. */
  private flushing = 0;
  private nextIndex = 0;
  private openIndex = -1;
  /** The open utterance started while max_concurrent_utterances were in flight: its audio is dropped. */
  private dropping = false;
  /** Language and prompt of the open utterance, fixed when it started (4.9: changes apply to new utterances). */
  private openLanguage = '';
  private openPrompt: string | undefined;
  private openStartMs = 0;
  /** Ended utterances awaiting the engine. */
  private readonly transcripts: Transcripts;
  private audioBytes = 0;
  /** Audio received but dropped with an utterance that could not start (max_concurrent_utterances): not billed. */
  private unbilledBytes = 0;
  private droppedBytes = 0;
  private lastThrottleAt = 0;
  /** Flushes sent to the VAD, oldest first: what each was for, and whether it ended an utterance. */
  private readonly flushes: { purpose: FlushPurpose; ended: boolean }[] = [];

  constructor(
    private readonly host: UtteranceHost,
    private readonly deps: UtteranceDeps,
  ) {
    this.transcripts = new Transcripts(host, deps, () => {
      if (this.host.state === 'draining' && this.idle) queueMicrotask(() => this.host.finalClose());
    });
  }

  get audioSeconds(): number {
    return (this.audioBytes - this.unbilledBytes) / PCM_BYTES_PER_SECOND;
  }

  get inFlight(): { utterances: number; bytes: number } {
    return { utterances: this.transcripts.count, bytes: this.transcripts.bytes };
  }

  /** Nothing in flight: no utterance awaiting the engine, no flush awaiting the VAD. */
  get idle(): boolean {
    return this.transcripts.count === 0 && this.flushing === 0;
  }

  /** New settings reach the VAD at once (language and prompt apply to utterances that start later). */
  configure(settings: SessionSettings): void {
    this.vad?.configure(settings);
  }

  /**
   * Ends the open utterance now (reason `flush`). A `commit` that ends none is reported
   * (`input_audio_buffer.commit_empty`, an event only the OpenAI dialect presents); a `discard`
   * drops the utterance it ends without a transcript (OpenAI's `input_audio_buffer.clear`).
   * `closing`: the session's own close (a drain), which does not wait for pause verdicts.
   */
  flush(purpose: FlushPurpose = 'flush', closing = false): void {
    if (!this.vad) {
      if (purpose === 'commit') this.host.emit({ type: COMMIT_EMPTY });
      return;
    }
    this.flushing++;
    this.flushes.push({ purpose, ended: false });
    this.vad.flush(closing);
  }

  /** Audio the session took (16 kHz PCM16LE). */
  audio(buf: Buffer): void {
    if (buf.length === 0) return;
    const cfg = this.deps.config;
    const limits = this.host.principal.limits;
    const drop = dropReason({
      inFlightUtterances: this.transcripts.count,
      maxConcurrentUtterances: limits.maxConcurrentUtterances,
      utteranceOpen: this.vadOpen,
      inFlightBytes: this.transcripts.bytes,
      softBytes: cfg.upstreamSoftBytes,
    });
    if (drop) return this.throttle(buf.length, drop);

    // The frame that crosses the budget is cut at it: its head is taken (billed, transcribed), then the session ends.
    const rest = this.host.remainingWindowSeconds;
    const { room, over } = budgetRoom(buf.length, this.audioBytes - this.unbilledBytes, limits, rest);
    if (over) buf = buf.subarray(0, room);
    this.audioBytes += buf.length;
    if (buf.length > 0 && !this.vad) {
      const settings = this.host.settings;
      this.leadIn = new LeadIn({
        gateDbfs: cfg.vad.gateDbfs,
        prefixMs: settings.prefixMs,
        sampleRate: PCM_BYTES_PER_SECOND / 2,
        enabled: settings.vad,
      });
      this.speech = this.deps.engine.openStream?.() ?? null;
      this.vad = this.deps.vad.open(settings, (evs) => this.onVadEvents(evs), {
        streamAudio: this.speech !== null,
      });
    }
    const heard = buf.length > 0 ? this.leadIn!.push(buf) : buf;
    if (heard.length > 0) this.vad!.push(heard);
    if (over) this.host.end(over);
  }

  /** A position the VAD reports (ms from its first sample) as a sample of the session's audio. */
  private sessionSample(vadMs: number): number {
    return this.leadIn!.toSessionSamples((vadMs * PCM_SAMPLE_RATE) / 1000);
  }

  private throttle(bytes: number, reason: Throttled['reason']): void {
    this.droppedBytes += bytes;
    const t = this.host.now();
    if (t - this.lastThrottleAt < THROTTLE_EVENT_INTERVAL_MS) return;
    this.lastThrottleAt = t;
    this.host.emit(
      events.throttled({
        reason,
        droppedBytes: this.droppedBytes,
        droppedMs: Math.round((this.droppedBytes / PCM_BYTES_PER_SECOND) * 1000),
        inFlightUtterances: this.transcripts.count,
        inFlightBytes: this.transcripts.bytes,
        maxConcurrentUtterances: this.host.principal.limits.maxConcurrentUtterances,
      }),
    );
    this.droppedBytes = 0;
  }

  private onVadEvents(evs: VadEvent[]): void {
    for (const ev of evs) {
      if (ev.type === 'flushed') {
        this.flushing--;
        const f = this.flushes.shift();
        if (f?.purpose === 'commit' && !f.ended && this.host.state !== 'closed')
          this.host.emit({ type: COMMIT_EMPTY });
        if (this.host.state === 'draining' && this.idle) this.host.finalClose();
      } else {
        this.handle(ev);
      }
    }
  }

  private handle(ev: SegmenterEvent): void {
    if (this.host.state === 'closed') return;
    if (ev.type === 'audio') {
      if (!this.dropping) this.streaming?.push(ev.pcm);
      return;
    }
    if (ev.type === 'pause') return this.judgePause(ev);
    this.vadOpen = ev.type === 'start';
    if (ev.type === 'start') {
      // The bound on utterances in flight (3.3) holds even when several start and stop within one
      // batch of audio or speech continues past a max_duration split: an utterance that would exceed
      // it is not started; its audio is dropped and reported with service.throttled when it ends.
      if (this.transcripts.count >= this.host.principal.limits.maxConcurrentUtterances) {
        this.dropping = true;
        this.deps.onUtterance?.('dropped');
        return;
      }
      const settings = this.host.settings;
      this.dropping = false;
      this.openIndex = this.nextIndex++;
      this.openLanguage = settings.language;
      this.openPrompt = settings.prompt;
      this.openStartMs = this.leadIn!.toSessionMs(ev.audioStartMs);
      const language = this.openLanguage === 'auto' ? undefined : this.openLanguage;
      this.streaming =
        this.speech?.begin({
          language,
          streamPosition: this.sessionSample(ev.audioStartMs),
          prompt: this.openPrompt,
          vocabulary: this.host.principal.vocabulary,
        }) ?? null;
      this.host.emit(events.speechStarted(this.openIndex, this.openStartMs));
    } else {
      if (this.dropping) {
        this.dropping = false;
        this.unbilledBytes += ev.pcm.length;
        return this.throttle(ev.pcm.length, 'max_concurrent_utterances');
      }
      const index = this.openIndex;
      this.openIndex = -1;
      const streaming = this.streaming;
      this.streaming = null;
      if (ev.reason === 'flush' && this.flushes.length > 0) {
        const f = this.flushes[0];
        f.ended = true;
        // Cleared by the client: no stopped, no transcript (its audio was received and is billed).
        if (f.purpose === 'discard') return streaming?.cancel();
      }
      const stoppedAt = this.host.now();
      this.host.emit(
        events.speechStopped(
          index,
          ev.reason,
          this.leadIn!.toSessionMs(ev.audioStartMs),
          this.leadIn!.toSessionMs(ev.audioEndMs),
        ),
      );
      // Sending speech_stopped may itself have closed the session (a client that stopped reading):
      // nothing more can reach it, so the utterance is not sent upstream.
      if ((this.host.state as SessionState) === 'closed') return streaming?.cancel();
      this.transcripts.send({
        index,
        pcm: ev.pcm,
        startSample: this.sessionSample(ev.audioStartMs),
        speechMs: ev.speechMs,
        stoppedAt,
        language: this.openLanguage,
        prompt: this.openPrompt,
        streaming,
      });
    }
  }

  /** A pause in the open utterance, which waits for its verdict: the silence that ends the turn (turnEnd.ts). */
  private judgePause(ev: PauseInfo): void {
    const vad = this.vad;
    if (!vad) return;
    judgePause(
      ev,
      this.dropping ? null : this.streaming,
      this.host.settings,
      (ms) => vad.verdict(ev.pause, ms),
      (reading, cues, waitMs) => logVerdict(this.deps.logger, this.host.sessionId, ev, reading, cues, waitMs),
    );
  }

  /**
   * The session is closing for good (events still writable): utterances in flight and the one
   * still open are reported as failed, never left silent.
   */
  failAll(closeCode: number, closeReason: string): void {
    this.transcripts.failAll(closeCode, closeReason);
    // An utterance still open (an abrupt close: 1009, 1011, 1013) was announced with speech_started:
    // it gets its speech_stopped (reason session_closed) and a failed completed, never silence.
    if (this.openIndex >= 0 && !this.dropping) {
      const index = this.openIndex;
      this.openIndex = -1;
      const why = `session closed (${closeReason || closeCode}) before the utterance ended`;
      this.host.emit(
        events.speechStopped(
          index,
          'session_closed',
          this.openStartMs,
          Math.round((this.audioBytes / PCM_BYTES_PER_SECOND) * 1000),
        ),
      );
      const language = this.openLanguage === 'auto' ? '' : this.openLanguage;
      const base = events.completedBase(index, language, 0, 0);
      this.transcripts.fail(index, base, this.host.now(), 'session_closed', why);
    }
  }

  /** The client went away: utterances in flight are abandoned (nothing can be reported). */
  abandon(): void {
    this.transcripts.abandon();
  }

  /** Releases the VAD stream and the engine's decoders. */
  close(): void {
    this.vad?.close();
    this.vad = null;
    this.streaming?.cancel();
    this.streaming = null;
    this.speech?.close();
    this.speech = null;
  }
}
