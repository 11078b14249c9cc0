/**
 * One realtime session: protocol messages in, events out, utterances to the
 * speech engine, limits and metering. Transport-agnostic (uWS in server.ts,
 * a plain `ws` server in the comparison benchmark), so the hot path is the
 * same code wherever it runs.
 *
 * Failure policy (decisions.md): every utterance that produced
 * `speech_stopped` gets exactly one `...transcription.completed`; when the
 * upstream fails the completed event carries `text: ""` and
 * `error: {code, message}`, preceded by an `error` event with the same
 * `utterance_index` and code `transcription_failed`.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Principal } from '../shared/auth/index.js';
import { PCM_BYTES_PER_SECOND, PCM_SAMPLE_RATE } from '../shared/audio/pcm.js';
import {
  EngineBusyError,
  type SpeechEngine,
  type SpeechStream,
  type StreamingUtterance,
  type TranscribeResult,
} from '../shared/stt/types.js';
import type { RealtimeConfig } from '../shared/config/realtime.js';
import type { SegmenterEvent } from '../shared/vad/segmenter.js';
import type { VadEvent, VadService, VadStream } from '../shared/vad/service.js';
import { applySessionUpdate, presentSettings, type SessionSettings } from './options.js';
import type { CircuitBreaker } from './breaker.js';

export interface Transport {
  send(text: string): void;
  /** Bytes queued for the client and not yet written. */
  bufferedAmount(): number;
  close(code: number, reason: string): void;
}

export interface SessionDeps {
  config: RealtimeConfig;
  engine: SpeechEngine;
  breaker: CircuitBreaker;
  vad: VadService;
  logger: Logger;
  now?: () => number;
  /** Measurement hook: stopped-to-completed time and the engine's own share of it. */
  onCompleted?: (latencyMs: number, engineMs: number) => void;
  /** Every utterance's outcome once: transcribed, failed (reported with an error) or dropped (not started). */
  onUtterance?: (outcome: 'completed' | 'failed' | 'dropped') => void;
}

type SessionState = 'open' | 'draining' | 'closed';

export const CLOSE = {
  normal: [1000, ''],
  sessionDuration: [1008, 'session_duration_limit'],
  sessionAudio: [1008, 'session_audio_limit'],
  quotaExhausted: [1008, 'audio_quota_exhausted'],
  frameTooLarge: [1009, 'audio_frame_too_large'],
  clientError: [1011, 'client_error'],
  upstreamUnavailable: [1013, 'upstream_unavailable'],
  upstreamBackpressure: [1013, 'upstream_backpressure'],
  clientBackpressure: [1013, 'client_backpressure'],
  idle: [4408, 'idle_timeout'],
  /** Instance shutting down: reconnect (to another instance). */
  goingAway: [1001, 'going_away'],
} as const satisfies Record<string, readonly [number, string]>;

export type CloseKind = keyof typeof CLOSE;

const THROTTLE_EVENT_INTERVAL_MS = 1000;

export const newSessionId = (): string => 'sess_' + randomBytes(12).toString('hex');
export const newRequestId = (): string => 'req_' + randomBytes(12).toString('hex');

interface Pending {
  index: number;
  bytes: number;
  abort: AbortController;
  timedOut: boolean;
  stoppedAt: number;
  /** Fields of the completed event known before the upstream answers. */
  base: Record<string, unknown>;
}

export interface SessionSummary {
  sessionId: string;
  keyId: string;
  audioSeconds: number;
  closeCode: number;
  closeReason: string;
}

export class RealtimeSession {
  readonly sessionId: string;
  readonly requestId: string;
  readonly startedAt: number;
  private lastAudioAt: number;
  private settings: SessionSettings;
  private vad: VadStream | null = null;
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
  private readonly pending = new Map<number, Pending>();
  private inFlightBytes = 0;
  private audioBytes = 0;
  /** Audio received but dropped with an utterance that could not start (max_concurrent_utterances): not billed. */
  private unbilledBytes = 0;
  private droppedBytes = 0;
  private lastThrottleAt = 0;
  private state: SessionState = 'open';
  private closeCode = 1000;
  private closeReason = '';
  private drainTimer: NodeJS.Timeout | undefined;
  private readonly now: () => number;
  /** Called once when the session has ended, whatever the reason. */
  onEnded: ((s: SessionSummary) => void) | undefined;

  constructor(
    readonly principal: Principal,
    /** Window budget left when the session began (seconds). */
    private readonly remainingWindowSeconds: number,
    private readonly transport: Transport,
    private readonly deps: SessionDeps,
    ids: { sessionId?: string; requestId?: string } = {},
  ) {
    this.sessionId = ids.sessionId ?? newSessionId();
    this.requestId = ids.requestId ?? newRequestId();
    this.now = deps.now ?? Date.now;
    this.startedAt = this.now();
    this.lastAudioAt = this.startedAt;
    const d = deps.config.vadDefaults;
    this.settings = {
      language: 'auto',
      prompt: undefined,
      backend: undefined,
      sttModel: undefined,
      normalizerModel: undefined,
      translateTo: undefined,
      vad: d.vad,
      threshold: d.threshold,
      silenceMs: d.silenceMs,
      prefixMs: d.prefixMs,
      minSpeechMs: d.minSpeechMs,
      targetSpeechMs: Math.min(d.targetSpeechMs, d.maxSpeechMs),
      maxSpeechMs: Math.min(d.maxSpeechMs, deps.config.maxSpeechMsCap),
      smartSplitWindowMs: d.smartSplitWindowMs,
    };
  }

  get limits() {
    const l = this.principal.limits;
    return {
      max_concurrent_utterances: l.maxConcurrentUtterances,
      max_session_seconds: l.maxSessionSeconds,
      idle_timeout_seconds: l.idleTimeoutSeconds,
      remaining_audio_seconds: Math.max(0, Math.floor(this.remainingWindowSeconds)),
    };
  }

  get isClosed(): boolean {
    return this.state === 'closed';
  }

  get audioSeconds(): number {
    return (this.audioBytes - this.unbilledBytes) / PCM_BYTES_PER_SECOND;
  }

  get inFlight(): { utterances: number; bytes: number } {
    return { utterances: this.pending.size, bytes: this.inFlightBytes };
  }

  start(): void {
    this.emit({
      type: 'session.created',
      request_id: this.requestId,
      session_id: this.sessionId,
      audio: { format: 'pcm_s16le', sample_rate: PCM_SAMPLE_RATE, channels: 1 },
      turn_detection: { type: 'server_vad' },
      plan: this.principal.plan,
      limits: this.limits,
      session: presentSettings(this.settings),
    });
    if (this.remainingWindowSeconds <= 0) this.end('quotaExhausted');
  }

  // ---- client messages -------------------------------------------------------------------

  onBinary(data: ArrayBuffer): void {
    if (this.state !== 'open') return;
    if (data.byteLength > this.deps.config.maxFrameBytes) return this.frameTooLarge(data.byteLength);
    if (data.byteLength % 2 !== 0) {
      return this.error(
        'invalid_audio',
        'Audio frames must hold whole 16-bit samples (an even number of bytes).',
      );
    }
    this.audio(Buffer.from(data));
  }

  onText(text: string): void {
    if (this.state !== 'open') return;
    const maxFrame = this.deps.config.maxFrameBytes;
    // No message is larger than an append carrying a whole frame of audio in base64.
    if (text.length > Math.ceil(maxFrame / 3) * 4 + 1024) return this.frameTooLarge(text.length);
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      return this.error('invalid_json', 'Text frames must be JSON objects.');
    }
    if (!msg || typeof msg !== 'object' || Array.isArray(msg)) {
      return this.error('invalid_json', 'Text frames must be JSON objects.');
    }
    const m = msg as Record<string, unknown>;
    // Frames other than audio are held to the frame limit too (appends are measured by their audio).
    if (text.length > maxFrame && m.type !== 'input_audio_buffer.append')
      return this.frameTooLarge(text.length);
    if (typeof m.type !== 'string' || m.type === '')
      return this.error('missing_type', 'Messages must carry a "type".');
    switch (m.type) {
      case 'session.update':
        return this.update(m);
      case 'input_audio_buffer.append':
        return this.append(m);
      case 'input_audio_buffer.flush':
      case 'flush':
        return this.flush();
      default:
        return this.error('unknown_type', `Unknown message type "${m.type.slice(0, 64)}".`);
    }
  }

  private update(m: Record<string, unknown>): void {
    const r = applySessionUpdate(this.settings, m, { maxSpeechMsCap: this.deps.config.maxSpeechMsCap });
    if (!r.ok) return this.error(r.code, r.message, { field: r.field });
    this.settings = r.settings;
    this.vad?.configure(this.settings);
    this.emit({
      type: 'session.updated',
      request_id: this.requestId,
      session_id: this.sessionId,
      session: presentSettings(this.settings),
      audio: { format: 'pcm_s16le', sample_rate: PCM_SAMPLE_RATE, channels: 1 },
      ignored_fields: r.ignored,
    });
  }

  private append(m: Record<string, unknown>): void {
    if (typeof m.audio !== 'string') return this.error('invalid_audio', '"audio" must be a base64 string.');
    const b64 = m.audio;
    // Decoded size is known before decoding: refuse oversized frames without allocating them.
    const decodedLen = Math.floor((b64.length * 3) / 4);
    if (decodedLen > this.deps.config.maxFrameBytes + 3) return this.frameTooLarge(decodedLen);
    if (b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) {
      return this.error('invalid_audio', '"audio" is not valid base64.');
    }
    const buf = Buffer.from(b64, 'base64');
    if (buf.length > this.deps.config.maxFrameBytes) return this.frameTooLarge(buf.length);
    if (buf.length % 2 !== 0) {
      return this.error('invalid_audio', 'Audio must hold whole 16-bit samples (an even number of bytes).');
    }
    this.audio(buf);
  }

  private frameTooLarge(size: number): void {
    this.error(
      'audio_frame_too_large',
      `Frame of ${size} bytes exceeds the frame limit of ${this.deps.config.maxFrameBytes} bytes.`,
    );
    this.end('frameTooLarge');
  }

  private flush(): void {
    if (!this.vad) return;
    this.flushing++;
    this.vad.flush();
  }

  // ---- audio and utterances ------------------------------------------------------------------

  private audio(buf: Buffer): void {
    this.lastAudioAt = this.now();
    if (buf.length === 0) return;
    const cfg = this.deps.config;
    // Utterance concurrency: while the limit is reached, audio that would start new speech is dropped.
    if (this.pending.size >= this.principal.limits.maxConcurrentUtterances && !this.vadOpen) {
      return this.throttle(buf.length, 'max_concurrent_utterances');
    }
    if (this.inFlightBytes > cfg.upstreamSoftBytes) return this.throttle(buf.length, 'upstream_backpressure');

    this.audioBytes += buf.length;
    const perSession = this.principal.limits.maxAudioSecondsPerSession;
    if (this.audioSeconds > Math.min(perSession, this.remainingWindowSeconds)) {
      // Whichever budget is smaller is the one that ran out.
      return this.end(this.remainingWindowSeconds < perSession ? 'quotaExhausted' : 'sessionAudio');
    }

    if (!this.vad) {
      this.speech = this.deps.engine.openStream?.() ?? null;
      this.vad = this.deps.vad.open(this.settings, (evs) => this.onVadEvents(evs), {
        streamAudio: this.speech !== null,
      });
    }
    this.vad.push(buf);
  }

  private throttle(bytes: number, reason: string): void {
    this.droppedBytes += bytes;
    const t = this.now();
    if (t - this.lastThrottleAt < THROTTLE_EVENT_INTERVAL_MS) return;
    this.lastThrottleAt = t;
    this.emit({
      type: 'service.throttled',
      reason,
      dropped_bytes: this.droppedBytes,
      dropped_ms: Math.round((this.droppedBytes / PCM_BYTES_PER_SECOND) * 1000),
      in_flight_utterances: this.pending.size,
      in_flight_bytes: this.inFlightBytes,
      max_concurrent_utterances: this.principal.limits.maxConcurrentUtterances,
    });
    this.droppedBytes = 0;
  }

  private onVadEvents(events: VadEvent[]): void {
    for (const ev of events) {
      if (ev.type === 'flushed') {
        this.flushing--;
        if (this.state === 'draining' && this.flushing === 0 && this.pending.size === 0) this.finalClose();
      } else {
        this.handle(ev);
      }
    }
  }

  private handle(ev: SegmenterEvent): void {
    if (this.state === 'closed') return;
    if (ev.type === 'audio') {
      if (!this.dropping) this.streaming?.push(ev.pcm);
      return;
    }
    this.vadOpen = ev.type === 'start';
    if (ev.type === 'start') {
      // The bound on utterances in flight (3.3) holds even when several start and stop within one
      // batch of audio or speech continues past a max_duration split: an utterance that would exceed
      // it is not started; its audio is dropped and reported with service.throttled when it ends.
      if (this.pending.size >= this.principal.limits.maxConcurrentUtterances) {
        this.dropping = true;
        this.deps.onUtterance?.('dropped');
        return;
      }
      this.dropping = false;
      this.openIndex = this.nextIndex++;
      this.openLanguage = this.settings.language;
      this.openPrompt = this.settings.prompt;
      this.openStartMs = ev.audioStartMs;
      const language = this.openLanguage === 'auto' ? undefined : this.openLanguage;
      this.streaming = this.speech?.begin({ language }) ?? null;
      this.emit({
        type: 'input_audio_buffer.speech_started',
        utterance_index: this.openIndex,
        audio_start_ms: ev.audioStartMs,
      });
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
      const stoppedAt = this.now();
      this.emit({
        type: 'input_audio_buffer.speech_stopped',
        utterance_index: index,
        reason: ev.reason,
        audio_start_ms: ev.audioStartMs,
        audio_end_ms: ev.audioEndMs,
      });
      // Sending speech_stopped may itself have closed the session (a client that stopped reading):
      // nothing more can reach it, so the utterance is not sent upstream.
      if ((this.state as SessionState) === 'closed') return streaming?.cancel();
      this.transcribe(index, ev.pcm, ev.speechMs, stoppedAt, this.openLanguage, this.openPrompt, streaming);
    }
  }

  private transcribe(
    index: number,
    pcm: Buffer,
    speechMs: number,
    stoppedAt: number,
    language: string,
    prompt: string | undefined,
    /** The utterance was fed to a streaming decoder as it was spoken: only its end is left. */
    streaming: StreamingUtterance | null,
  ): void {
    const cfg = this.deps.config;
    const audioMs = Math.round((pcm.length / PCM_BYTES_PER_SECOND) * 1000);
    const abort = new AbortController();
    const base = {
      type: 'conversation.item.input_audio_transcription.completed',
      utterance_index: index,
      // The language this utterance was sent with (a later session.update does not change it).
      language: language === 'auto' ? '' : language,
      audio_duration_ms: audioMs,
      speech_duration_ms: speechMs,
    };
    const p: Pending = { index, bytes: pcm.length, abort, timedOut: false, stoppedAt, base };
    this.pending.set(index, p);
    this.inFlightBytes += pcm.length;
    if (this.inFlightBytes > cfg.upstreamHardBytes) {
      streaming?.cancel();
      this.end('upstreamBackpressure');
      return;
    }
    const timer = setTimeout(() => {
      p.timedOut = true;
      abort.abort(new Error('transcription timed out'));
    }, cfg.transcribeTimeoutMs);
    const result: Promise<TranscribeResult> = streaming
      ? streaming.finish(abort.signal)
      : this.deps.engine.transcribe({
          pcm,
          language: language === 'auto' ? undefined : language,
          prompt,
          model: this.settings.sttModel,
          signal: abort.signal,
        });
    result
      .then(
        (r) => {
          this.deps.breaker.success();
          if (!this.settle(p)) return;
          const latency = this.now() - stoppedAt;
          this.emit({
            ...base,
            text: r.text,
            language: r.language || (language === 'auto' ? '' : language),
            latency_ms: Math.round(latency),
          });
          this.deps.onCompleted?.(latency, r.engineMs);
          this.deps.onUtterance?.('completed');
        },
        (err: unknown) => {
          const e = err as { code?: string; message?: string; retryable?: boolean };
          // Engine failures count, waiting does not: our own timeout, and an engine that says it is behind
          // (EngineBusyError: its decode limit passed on busy cores), measure queueing behind other sessions
          // (overload, refused at admission), not a broken engine (the speech client's attempt timeouts
          // report a hung one). A session that went away aborts its own requests, and an upstream that
          // refuses one request (unsupported language: retryable=false) is up.
          const counts = !abort.signal.aborted && e.retryable !== false && !(err instanceof EngineBusyError);
          if (counts) this.deps.breaker.failure();
          if (!this.settle(p)) return;
          this.deps.logger.warn({ err, sessionId: this.sessionId, index }, 'utterance transcription failed');
          this.failUtterance(
            index,
            base,
            stoppedAt,
            e.code ?? 'transcription_failed',
            e.message ?? 'transcription failed',
          );
          if (this.deps.breaker.isOpen && this.state === 'open') this.end('upstreamUnavailable');
        },
      )
      .finally(() => clearTimeout(timer));
  }

  private failUtterance(
    index: number,
    base: Record<string, unknown>,
    stoppedAt: number,
    upstreamCode: string,
    message: string,
  ): void {
    this.emit({
      type: 'error',
      code: 'transcription_failed',
      message,
      utterance_index: index,
      upstream_code: upstreamCode,
    });
    this.emit({
      ...base,
      text: '',
      latency_ms: Math.round(this.now() - stoppedAt),
      error: { code: 'transcription_failed', message },
    });
    this.deps.onUtterance?.('failed');
  }

  /** Removes a finished utterance; false when the session already reported it. */
  private settle(p: Pending): boolean {
    if (!this.pending.delete(p.index)) return false;
    this.inFlightBytes -= p.bytes;
    if (this.state === 'draining' && this.pending.size === 0 && this.flushing === 0)
      queueMicrotask(() => this.finalClose());
    return this.state !== 'closed';
  }

  /** True while events can still be written (the final close has been decided but not sent). */
  private closeWritable = false;

  // ---- events, limits, close ------------------------------------------------------------------

  private emit(ev: Record<string, unknown>): void {
    if (this.state === 'closed' && !this.closeWritable) return;
    this.transport.send(JSON.stringify(ev));
    if (
      this.state !== 'closed' &&
      this.transport.bufferedAmount() > this.deps.config.clientBackpressureBytes
    ) {
      this.end('clientBackpressure');
    }
  }

  private error(code: string, message: string, extra: Record<string, unknown> = {}): void {
    this.emit({ type: 'error', code, message, ...extra });
  }

  /** Housekeeping pass (server timer): idle and wall-clock limits. */
  tick(now = this.now()): void {
    if (this.state !== 'open') return;
    const l = this.principal.limits;
    if (now - this.startedAt >= l.maxSessionSeconds * 1000) return this.end('sessionDuration');
    if (now - this.lastAudioAt >= l.idleTimeoutSeconds * 1000) return this.end('idle');
  }

  /**
   * Ends the session from the server side. Limit closes (1008, 4408) and the
   * shutdown close (1001) finish the open utterance and wait (bounded by
   * REALTIME_CLOSE_DRAIN_MS) for utterances in flight; the others close at
   * once and report utterances in flight as failed.
   */
  end(kind: CloseKind): void {
    if (this.state !== 'open') {
      if (this.state === 'draining' && kind !== 'normal') this.finalClose();
      return;
    }
    const [code, reason] = CLOSE[kind];
    this.closeCode = code;
    this.closeReason = reason;
    const graceful = code === 1008 || code === 4408 || code === 1000 || code === 1001;
    if (graceful) {
      this.state = 'draining';
      this.flush();
      if (this.state !== 'draining') return;
      if (this.pending.size === 0 && this.flushing === 0) return this.finalClose();
      this.drainTimer = setTimeout(() => this.finalClose(), this.deps.config.closeDrainMs);
      return;
    }
    this.finalClose();
  }

  private finalClose(): void {
    if (this.state === 'closed') return;
    clearTimeout(this.drainTimer);
    this.state = 'closed';
    this.closeWritable = true;
    for (const p of [...this.pending.values()]) {
      p.abort.abort(new Error('session closed'));
      this.pending.delete(p.index);
      this.inFlightBytes -= p.bytes;
      const why = `session closed (${this.closeReason || this.closeCode}) before the transcription finished`;
      this.failUtterance(p.index, p.base, p.stoppedAt, 'session_closed', why);
    }
    // An utterance still open (an abrupt close: 1009, 1011, 1013) was announced with speech_started:
    // it gets its speech_stopped (reason session_closed) and a failed completed, never silence.
    if (this.openIndex >= 0 && !this.dropping) {
      const index = this.openIndex;
      this.openIndex = -1;
      const why = `session closed (${this.closeReason || this.closeCode}) before the utterance ended`;
      this.emit({
        type: 'input_audio_buffer.speech_stopped',
        utterance_index: index,
        reason: 'session_closed',
        audio_start_ms: this.openStartMs,
        audio_end_ms: Math.round((this.audioBytes / PCM_BYTES_PER_SECOND) * 1000),
      });
      const language = this.openLanguage === 'auto' ? '' : this.openLanguage;
      const base = {
        type: 'conversation.item.input_audio_transcription.completed',
        utterance_index: index,
        language,
        audio_duration_ms: 0,
        speech_duration_ms: 0,
      };
      this.failUtterance(index, base, this.now(), 'session_closed', why);
    }
    this.closeWritable = false;
    this.transport.close(this.closeCode, this.closeReason);
    this.cleanup();
  }

  /** The client closed or the socket failed: nothing more can be sent. */
  onTransportClosed(code: number, reason = ''): void {
    if (this.state === 'closed') return;
    clearTimeout(this.drainTimer);
    this.state = 'closed';
    this.closeCode = code;
    this.closeReason = reason;
    for (const p of this.pending.values()) p.abort.abort(new Error('client went away'));
    this.pending.clear();
    this.inFlightBytes = 0;
    this.cleanup();
  }

  private ended = false;

  private cleanup(): void {
    if (this.ended) return;
    this.ended = true;
    this.vad?.close();
    this.vad = null;
    this.streaming?.cancel();
    this.streaming = null;
    this.speech?.close();
    this.speech = null;
    this.onEnded?.({
      sessionId: this.sessionId,
      keyId: this.principal.keyId,
      audioSeconds: this.audioSeconds,
      closeCode: this.closeCode,
      closeReason: this.closeReason,
    });
  }
}
