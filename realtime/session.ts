/**
 * One realtime session: the native protocol's commands in (protocol.ts),
 * utterances through the VAD and the speech engine (utterances.ts), limits
 * and the close (closePolicy.ts), events out through a transport.
 * Transport-agnostic (uWS in server.ts, a plain `ws` server in the
 * comparison benchmark, a fake in the unit tests), so the hot path is the
 * same code wherever it runs.
 */
import { randomBytes } from 'node:crypto';
import type { Principal } from '../shared/auth/index.js';
import { applySessionUpdate, presentSettings, type SessionSettings } from './options.js';
import {
  events,
  frameTooLargeMessage,
  NATIVE_PROTOCOL,
  type ClientCommand,
  type SessionProtocol,
} from './protocol.js';
import type { SessionEvent, SessionUpdateMessage } from './wire.js';
import { SessionCloser, timeLimit, type CloseKind, type SessionState } from './closePolicy.js';
import { UtteranceTracker, type UtteranceDeps, type UtteranceHost } from './utterances.js';
import { SplitOrder } from './splitOrder.js';

export { CLOSE, type CloseKind } from './closePolicy.js';

const utf8 = new TextDecoder();

export interface Transport {
  send(text: string): void;
  /** Bytes queued for the client and not yet written. */
  bufferedAmount(): number;
  close(code: number, reason: string): void;
}

export interface SessionDeps extends UtteranceDeps {
  now?: () => number;
}

export const newSessionId = (): string => 'sess_' + randomBytes(12).toString('hex');
export const newRequestId = (): string => 'req_' + randomBytes(12).toString('hex');

export interface SessionSummary {
  sessionId: string;
  keyId: string;
  audioSeconds: number;
  closeCode: number;
  closeReason: string;
}

/** The least audio a frame must carry to count as activity for the idle timeout: 10 ms of 16 kHz PCM16. */
const MIN_LIVE_FRAME_BYTES = 320;
export class RealtimeSession implements UtteranceHost {
  readonly sessionId: string;
  readonly requestId: string;
  readonly startedAt: number;
  private lastAudioAt: number;
  private _settings: SessionSettings;
  private readonly utterances: UtteranceTracker;
  /** Later utterances' events wait for a cut one's `completed` (interface 3.3). */
  private readonly splitOrder = new SplitOrder();
  private readonly closer: SessionCloser;
  private readonly clock: () => number;
  /** Called once when the session has ended, whatever the reason. */
  onEnded: ((s: SessionSummary) => void) | undefined;

  constructor(
    readonly principal: Principal,
    /** Window budget left when the session began (seconds). */
    readonly remainingWindowSeconds: number,
    private readonly transport: Transport,
    private readonly deps: SessionDeps,
    ids: { sessionId?: string; requestId?: string } = {},
    /** How it speaks to the client: the native protocol unless told (realtime/openai.ts). */
    private readonly protocol: SessionProtocol = NATIVE_PROTOCOL,
  ) {
    this.sessionId = ids.sessionId ?? newSessionId();
    this.requestId = ids.requestId ?? newRequestId();
    this.clock = deps.now ?? Date.now;
    this.startedAt = this.now();
    this.lastAudioAt = this.startedAt;
    const d = deps.config.vadDefaults;
    this._settings = {
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
      sentenceEndSilenceMs: d.sentenceEndSilenceMs,
      sentenceEndThreshold: d.sentenceEndThreshold,
      eagerness: d.eagerness,
      unjudgedSilenceMs: d.unjudgedSilenceMs,
    };
    this.utterances = new UtteranceTracker(this, deps);
    this.closer = new SessionCloser({
      flush: () => this.utterances.flush('flush', true),
      idle: () => this.utterances.idle,
      finalize: (code, reason) => {
        this.utterances.failAll(code, reason);
        this.closer.writable = false;
        this.transport.close(code, reason);
        this.cleanup();
      },
      abandon: () => {
        this.utterances.abandon();
        this.cleanup();
      },
      drainMs: deps.config.closeDrainMs,
    });
  }

  now(): number {
    return this.clock();
  }

  get settings(): SessionSettings {
    return this._settings;
  }

  get state(): SessionState {
    return this.closer.state;
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
    return this.utterances.audioSeconds;
  }

  get inFlight(): { utterances: number; bytes: number } {
    return this.utterances.inFlight;
  }

  start(): void {
    this.emit(
      events.sessionCreated({
        requestId: this.requestId,
        sessionId: this.sessionId,
        plan: this.principal.plan,
        limits: this.limits,
        session: presentSettings(this._settings),
      }),
    );
    if (this.remainingWindowSeconds <= 0) this.end('quotaExhausted');
  }

  // ---- client messages -------------------------------------------------------------------

  onBinary(data: ArrayBuffer): void {
    if (this.state !== 'open') return;
    this.run(this.protocol.parseBinary(data, this.deps.config.maxFrameBytes));
  }

  /** A text frame: its bytes as they arrived (uWS has checked their UTF-8), or a string. */
  onText(frame: Uint8Array | string): void {
    if (this.state !== 'open') return;
    const max = this.deps.config.maxFrameBytes;
    const bytes = typeof frame === 'string' ? Buffer.from(frame) : frame;
    // Most text frames are appends: read from their bytes; anything else as a string.
    this.run(this.protocol.parseAppendFrame(bytes, max) ?? this.protocol.parseText(utf8.decode(bytes), max));
  }

  private run(cmd: ClientCommand): void {
    switch (cmd.kind) {
      case 'audio':
        return this.audio(cmd.pcm);
      case 'update':
        return this.update(cmd.msg);
      case 'flush':
        return this.utterances.flush();
      case 'commit':
        return this.utterances.flush('commit');
      case 'clear':
        this.utterances.flush('discard');
        return this.emit({ type: 'input_audio_buffer.cleared' });
      case 'invalid':
        return this.error(cmd.code, cmd.message, cmd.field === undefined ? {} : { field: cmd.field });
      case 'tooLarge':
        return this.frameTooLarge(cmd.size);
    }
  }

  private update(m: SessionUpdateMessage): void {
    const r = applySessionUpdate(this._settings, m, {
      maxSpeechMsCap: this.deps.config.maxSpeechMsCap,
      languages: this.deps.engine.languages(),
    });
    if (!r.ok) return this.error(r.code, r.message, { field: r.field });
    this._settings = r.settings;
    this.utterances.configure(this._settings);
    this.emit(
      events.sessionUpdated({
        requestId: this.requestId,
        sessionId: this.sessionId,
        session: presentSettings(this._settings),
        ignored: r.ignored,
      }),
    );
  }

  private audio(buf: Buffer): void {
    // Frames of less than 10 ms of audio are not activity: empty frames every 5 s held a session (and its
    // instance's slot) past its idle timeout for nothing billed (issue 41, third pass).
    if (buf.length >= MIN_LIVE_FRAME_BYTES) this.lastAudioAt = this.now();
    this.utterances.audio(buf);
  }

  private frameTooLarge(size: number): void {
    this.error('audio_frame_too_large', frameTooLargeMessage(size, this.deps.config.maxFrameBytes));
    this.end('frameTooLarge');
  }

  // ---- events, limits, close ------------------------------------------------------------------

  emit(ev: SessionEvent): void {
    for (const next of this.splitOrder.pass(ev)) {
      if (!this.protocol.present) this.send(next);
      else for (const out of this.protocol.present(next)) this.send(out);
    }
  }

  private send(ev: { type: string }): void {
    if (this.state === 'closed' && !this.closer.writable) return;
    this.transport.send(JSON.stringify(ev));
    if (
      this.state !== 'closed' &&
      this.transport.bufferedAmount() > this.deps.config.clientBackpressureBytes
    ) {
      this.end('clientBackpressure');
    }
  }

  private error(code: string, message: string, extra: { field?: string } = {}): void {
    this.emit(events.error(code, message, extra));
  }

  /** Housekeeping pass (server timer): idle and wall-clock limits. */
  tick(now = this.now()): void {
    if (this.state !== 'open') return;
    const kind = timeLimit(now, this.startedAt, this.lastAudioAt, this.principal.limits);
    if (kind) this.end(kind);
  }

  /**
   * Ends the session from the server side. Limit closes (1008, 4408) and the
   * shutdown close (1001) finish the open utterance and wait (bounded by
   * REALTIME_CLOSE_DRAIN_MS) for utterances in flight; the others close at
   * once and report utterances in flight as failed.
   */
  end(kind: CloseKind): void {
    this.closer.end(kind);
  }

  finalClose(): void {
    this.closer.finalClose();
  }

  /** The client closed or the socket failed: nothing more can be sent. */
  onTransportClosed(code: number, reason = ''): void {
    this.closer.transportClosed(code, reason);
  }

  private ended = false;

  private cleanup(): void {
    if (this.ended) return;
    this.ended = true;
    this.utterances.close();
    this.onEnded?.({
      sessionId: this.sessionId,
      keyId: this.principal.keyId,
      audioSeconds: this.audioSeconds,
      closeCode: this.closer.code,
      closeReason: this.closer.reason,
    });
  }
}
