/**
 * When and how a realtime session ends (interface 7.3, docs/realtime.md
 * "Limits and closes"): the close codes and reasons, the limits that end a
 * session (wall clock, idle, session audio, window quota), the backpressure
 * bounds, and the state machine of the close itself: limit and shutdown
 * closes drain (the open utterance is finished and transcripts in flight are
 * awaited, bounded by closeDrainMs), every other close is final at once.
 */
import type { PlanLimits } from '../shared/plans.js';
import { PCM_BYTES_PER_SECOND } from '../shared/audio/pcm.js';

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
  /** The key was revoked or expired while the session was open (realtime/revocation.ts): do not reconnect with it. */
  keyRevoked: [1008, 'api_key_revoked'],
  keyExpired: [1008, 'api_key_expired'],
  /** Its connection slot was found taken by another session after a lease-store blip (realtime/quota.ts). */
  slotLost: [1013, 'too_many_connections'],
  /** Instance shutting down: reconnect (to another instance). */
  goingAway: [1001, 'going_away'],
} as const satisfies Record<string, readonly [number, string]>;

export type CloseKind = keyof typeof CLOSE;

export type SessionState = 'open' | 'draining' | 'closed';

/** At most one `service.throttled` per this interval, counting what was dropped since the last. */
export const THROTTLE_EVENT_INTERVAL_MS = 1000;

type Limits = Pick<
  PlanLimits,
  'maxSessionSeconds' | 'idleTimeoutSeconds' | 'maxConcurrentUtterances' | 'maxAudioSecondsPerSession'
>;

/** The housekeeping limits: wall clock first, then idle (no audio frame for idleTimeoutSeconds). */
export function timeLimit(
  now: number,
  startedAt: number,
  lastAudioAt: number,
  l: Limits,
): CloseKind | undefined {
  if (now - startedAt >= l.maxSessionSeconds * 1000) return 'sessionDuration';
  if (now - lastAudioAt >= l.idleTimeoutSeconds * 1000) return 'idle';
  return undefined;
}

/** Session audio over its budget: whichever of the session's and the window's budgets is smaller ran out. */
export function audioLimit(
  audioSeconds: number,
  perSession: number,
  remainingWindowSeconds: number,
): CloseKind | undefined {
  if (audioSeconds <= Math.min(perSession, remainingWindowSeconds)) return undefined;
  return remainingWindowSeconds < perSession ? 'quotaExhausted' : 'sessionAudio';
}

/**
 * How many of `bytes` new bytes of audio fit the smaller of the session's and the window's budget
 * (an even count: whole samples), `billedBytes` taken so far; `over` is the close when not all fit.
 */
export function budgetRoom(
  bytes: number,
  billedBytes: number,
  limits: Pick<PlanLimits, 'maxAudioSecondsPerSession'>,
  remainingWindowSeconds: number,
): { room: number; over: CloseKind | undefined } {
  const perSession = limits.maxAudioSecondsPerSession;
  const budget = Math.floor(Math.min(perSession, remainingWindowSeconds) * PCM_BYTES_PER_SECOND);
  const left = Math.max(0, budget - billedBytes);
  const room = left - (left % 2);
  return { room, over: bytes > room ? audioLimit(Infinity, perSession, remainingWindowSeconds) : undefined };
}

/**
 * Why a frame of audio is dropped (reported with `service.throttled`) instead of taken: while
 * max_concurrent_utterances are in flight, audio that would start new speech; while more than
 * the soft bound is in flight to the upstream, any audio.
 */
export function dropReason(o: {
  inFlightUtterances: number;
  maxConcurrentUtterances: number;
  utteranceOpen: boolean;
  inFlightBytes: number;
  softBytes: number;
}): 'max_concurrent_utterances' | 'upstream_backpressure' | undefined {
  if (o.inFlightUtterances >= o.maxConcurrentUtterances && !o.utteranceOpen)
    return 'max_concurrent_utterances';
  if (o.inFlightBytes > o.softBytes) return 'upstream_backpressure';
  return undefined;
}

/** Limit closes (1008, 4408), normal and shutdown (1001) drain; the others are final at once. */
export const isGraceful = (code: number): boolean =>
  code === 1008 || code === 4408 || code === 1000 || code === 1001;

export interface CloseHooks {
  /** Ends the open utterance (a VAD flush that does not wait for pause verdicts); may itself end the session. */
  flush(): void;
  /** Nothing in flight: no utterance awaiting the engine, no flush awaiting the VAD. */
  idle(): boolean;
  /** Reports what is still in flight, sends the close frame and releases the session (events still writable). */
  finalize(code: number, reason: string): void;
  /** The client closed or the socket failed: nothing more can be sent. */
  abandon(): void;
  drainMs: number;
}

/** The state of a session's close: open, draining (a graceful close awaiting its work), closed. */
export class SessionCloser {
  state: SessionState = 'open';
  code = 1000;
  reason = '';
  /** True while events can still be written (the final close has been decided but not sent). */
  writable = false;
  private drainTimer: NodeJS.Timeout | undefined;

  constructor(private readonly hooks: CloseHooks) {}

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
    this.code = code;
    this.reason = reason;
    if (isGraceful(code)) {
      this.state = 'draining';
      this.hooks.flush();
      if (this.state !== 'draining') return;
      if (this.hooks.idle()) return this.finalClose();
      this.drainTimer = setTimeout(() => this.finalClose(), this.hooks.drainMs);
      return;
    }
    this.finalClose();
  }

  finalClose(): void {
    if (this.state === 'closed') return;
    clearTimeout(this.drainTimer);
    this.state = 'closed';
    this.writable = true;
    this.hooks.finalize(this.code, this.reason);
  }

  /** The client closed or the socket failed. */
  transportClosed(code: number, reason: string): void {
    if (this.state === 'closed') return;
    clearTimeout(this.drainTimer);
    this.state = 'closed';
    this.code = code;
    this.reason = reason;
    this.hooks.abandon();
  }
}
