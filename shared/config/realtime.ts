import os from 'node:os';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Env, str, int, bool, list } from './env.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The Silero VAD v5 model shipped in @ricky0123/vad-web, found through package resolution (works from dist/ too). */
function sileroModelPath(): string {
  try {
    const pkg = createRequire(import.meta.url).resolve('@ricky0123/vad-web/package.json');
    return path.join(path.dirname(pkg), 'dist/silero_vad_v5.onnx');
  } catch {
    return path.join(repoRoot, 'node_modules/@ricky0123/vad-web/dist/silero_vad_v5.onnx');
  }
}

/** Server-side VAD defaults; every one can be changed per session through `session.update`. */
/** How speech is cut into utterances (defaults below, per session via `session.update`; realtime/vad/segmenter.ts applies them). */
export interface SegmenterSettings {
  vad: boolean;
  /** Silero speech probability threshold (0..1). */
  threshold: number;
  /** Silence that ends an utterance. */
  silenceMs: number;
  /** Audio kept before the detected speech onset. */
  prefixMs: number;
  /** Speech shorter than this never starts an utterance (clicks, coughs). */
  minSpeechMs: number;
  /** Past this length the utterance is cut at the next short pause. */
  targetSpeechMs: number;
  /** Hard cut (reason max_duration); the next utterance starts at once. */
  maxSpeechMs: number;
  /** The hard cut is placed at the quietest 32 ms window within this many ms before the limit (0 = cut exactly). */
  smartSplitWindowMs: number;
  /**
   * Turn ends (realtime/turnEnd.ts): a pause this long (shorter than
   * `silenceMs`) is judged. With an `eagerness`, from the streaming decoder's
   * words, the phrase's prosody and the speaker's pauses, `silenceMs` being
   * the longest wait; without one (the default), the utterance ends there when
   * the words so far end a sentence (`sentenceEndThreshold`), else at
   * `silenceMs`. 0 or absent: only `silenceMs` ends speech (a fixed window).
   */
  sentenceEndSilenceMs?: number;
  /** Without an eagerness: the language model's trigram probability of a sentence end that ends a judged pause. */
  sentenceEndThreshold?: number;
  /** How eagerly turns end (`vad_eagerness`; TURN_LEVELS); null: the window `silenceMs` (and the sentence-end check). */
  eagerness?: Eagerness | null;
  /** With turn ends on, the window when a pause cannot be judged (no streaming decoder: remote engines). */
  unjudgedSilenceMs?: number;
}

/**
 * Node flags of the realtime process, wherever it is started (`npm start`, `npm run cluster`, compose,
 * Kubernetes): semi-spaces of 2 MiB instead of V8's 16. Audio frames are short-lived; with the default
 * the main thread's new space grew to 48 MiB resident under load (docs/decisions/platform.md,
 * "Young generation").
 */
export const REALTIME_NODE_FLAGS = ['--max-semi-space-size=2'];

export type Eagerness = 'low' | 'medium' | 'high' | 'auto';

/**
 * Per eagerness (OpenAI's `semantic_vad` names; `auto` is `medium`): when a
 * pause is first judged (`askMs`), and how long the turn waits when the
 * speaker has surely finished (at once), has probably finished (`likelyMs`),
 * cannot be read (`unsureMs`) or surely goes on (`longestMs`, the default
 * `vad_silence_ms`). Measured on the turn corpus: docs/decisions/turns.md, "Turn ends".
 */
export const TURN_LEVELS: Readonly<
  Record<Eagerness, { askMs: number; likelyMs: number; unsureMs: number; longestMs: number }>
> = {
  high: { askMs: 96, likelyMs: 192, unsureMs: 416, longestMs: 640 },
  medium: { askMs: 128, likelyMs: 416, unsureMs: 704, longestMs: 900 },
  auto: { askMs: 128, likelyMs: 416, unsureMs: 704, longestMs: 900 },
  low: { askMs: 160, likelyMs: 704, unsureMs: 960, longestMs: 1200 },
};
/** The fixed window (no eagerness: the default, OpenAI's server_vad), when none is given. */
export const FIXED_SILENCE_MS = 300;
/** Without an eagerness, the pause put to the sentence-end check (a client's own window turns it off). */
export const SENTENCE_END_SILENCE_MS = 160;

export type VadDefaults = SegmenterSettings;

/** Realtime tier settings (uWebSockets.js process, VAD, backpressure). */
export interface RealtimeConfig {
  host: string;
  port: number;
  /** False answers every upgrade with 503 gateway_disabled. */
  enabled: boolean;
  /** Largest audio frame (binary frame, or decoded base64 of one append). */
  maxFrameBytes: number;
  /** Transport cap on one WebSocket message (uWS drops the connection above it); frames between the two get 1009. */
  maxMessageBytes: number;
  /** In-flight audio to the speech upstream above which frames are dropped (service.throttled). */
  upstreamSoftBytes: number;
  /** In-flight audio above which the connection closes 1013 upstream_backpressure. */
  upstreamHardBytes: number;
  /** Unsent bytes queued for a client above which it closes 1013 client_backpressure. */
  clientBackpressureBytes: number;
  /** Connection lease TTL in Redis/memory; a dead instance's slots free within this. */
  leaseTtlMs: number;
  /** How often one timer renews every lease of this instance. */
  leaseRenewMs: number;
  /** Seconds between session housekeeping passes (idle, duration limits). */
  tickMs: number;
  /** How often each instance checks that the keys of its open sessions are still active (realtime/revocation.ts). */
  revocationCheckMs: number;
  /** Circuit breaker over the speech upstream. */
  breaker: { failureThreshold: number; openMs: number };
  /** Per-utterance upstream timeout. */
  transcribeTimeoutMs: number;
  vadDefaults: VadDefaults;
  vad: {
    /** Worker threads running segmenters and silero (0 = in the server's own thread). */
    threads: number;
    /** Silero VAD v5 ONNX file (MIT, shipped in @ricky0123/vad-web). */
    modelPath: string;
    /** Windows quieter than this (RMS, dBFS) while no speech is open skip the model entirely. */
    gateDbfs: number;
    /** Per-stream silero states created at start (a few KB each; one model per VAD thread). */
    poolWarm: number;
    /** Upper bound of streams holding a silero state; beyond it streams fall back to the energy detector. */
    poolMax: number;
    /** A stream returns its silero state after this much gated silence. */
    releaseAfterMs: number;
    /** VAD threads: audio waits at most this long so that many streams' windows share one model call. */
    batchWaitMs: number;
    /** ... or until this many windows of audio are waiting. */
    batchWindows: number;
    /** Speech hold (see realtime/vad/segmenter.ts): dB above the noise floor that skips the model mid-speech; 0 = off. */
    holdDb: number;
    /** At most this many consecutive windows skipped by the hold. */
    maxSkip: number;
    /** Quiet ends (realtime/vad/speechFlags.ts): dB above the noise floor at which an open utterance's window (20 dB below its loudest) is silence; 0 = off. */
    quietDb: number;
    /** A candidate utterance is broken by this much silence, or the session's silence window when longer (segmenter.ts). */
    candidateGapMs: number;
  };
  /** Allowed upper bound for a session's vadMaxSpeechMs. */
  maxSpeechMsCap: number;
  /** Graceful closes (limits, shutdown) wait at most this long for utterances in flight. */
  closeDrainMs: number;
  /**
   * Per-instance admission under overload: new sessions are refused (503
   * upstream_unavailable with Retry-After) while this instance holds
   * `maxSessions` sessions or `maxQueuedUtterances` utterances wait for the
   * speech engine; sessions already open keep their utterances. 0 = no limit.
   */
  overload: {
    maxSessions: number;
    maxQueuedUtterances: number;
    retryAfterSeconds: number;
    /**
     * Upgrades whose credential is still being checked (issue 36): they do not count as sessions, and
     * are bounded on their own, per instance and per client address (429 past the latter).
     */
    maxAuthenticating: number;
    maxAuthenticatingPerSource: number;
    /**
     * Percent of `maxSessions` one owner (tenant) may hold on an instance (REALTIME_OWNER_SHARE,
     * issue 41): the rest stays for other tenants. 100 = off.
     */
    ownerSharePercent: number;
  };
  /** Refuse to start on the pure-JS fallback of uWebSockets.js. */
  requireNativeUws: boolean;
  /** Where the API proxies upgrades to in embedded mode (host:port of this process). */
  upstreamProxyTarget: string | undefined;
  /**
   * The realtime instances' readiness URLs the API's /readyz checks (interface
   * 4.2: ready when realtime traffic can be accepted, so when any answers 200).
   * REALTIME_READY_URLS, else the proxy target's /readyz (loadConfig), else none.
   */
  readyUrls: string[];
}

// Internal tuning of the realtime tier (not environment variables; docs/decisions.md, "Configuration surface").
/** Interface 7: largest audio frame (binary frame, or decoded base64 of one append); 1009 above. */
export const MAX_FRAME_BYTES = 1024 * 1024;
/** Transport cap on one WebSocket message (uWS drops the connection above it); frames between the two get 1009. */
export const MAX_MESSAGE_BYTES = 8 * 1024 * 1024;
/** Interface 7: soft / hard in-flight audio to the speech upstream (service.throttled / close 1013). */
export const UPSTREAM_SOFT_BYTES = 1024 * 1024;
export const UPSTREAM_HARD_BYTES = 8 * 1024 * 1024;
/** Unsent bytes queued for a client above which it closes 1013 client_backpressure. */
export const CLIENT_BACKPRESSURE_BYTES = 1024 * 1024;
/** Session housekeeping (idle, duration limits) runs this often. */
export const TICK_MS = 1000;
/** Revoked and expired keys' sessions end within this (issue 22: within 5 s). */
export const REVOCATION_CHECK_MS = 2000;
/** Circuit breaker over the speech upstream: consecutive failures that open it, and how long it stays open. */
export const BREAKER_FAILURES = 5;
export const BREAKER_OPEN_MS = 10_000;
/** Retry-After of an upgrade refused for overload. */
export const OVERLOAD_RETRY_AFTER_SECONDS = 2;
/** Upgrades being authenticated at once, per instance and per client address (pre-auth work). */
export const MAX_AUTHENTICATING = 256;
export const MAX_AUTHENTICATING_PER_SOURCE = 32;
/** Allowed upper bound of a session's vadMaxSpeechMs. */
export const MAX_SPEECH_MS_CAP = 60_000;
/**
 * Server VAD defaults of a new session (docs/realtime.md, "Server VAD"); a
 * client changes every one through `session.update`.
 */
export const VAD_DEFAULTS: Readonly<VadDefaults> = {
  vad: true,
  threshold: 0.5,
  silenceMs: FIXED_SILENCE_MS,
  prefixMs: 300,
  minSpeechMs: 250,
  targetSpeechMs: 15_000,
  maxSpeechMs: 30_000,
  smartSplitWindowMs: 2_000,
  // Judged turn ends are opt-in (vad_eagerness): docs/decisions/turns.md, "Turn ends".
  sentenceEndSilenceMs: SENTENCE_END_SILENCE_MS,
  sentenceEndThreshold: 0.1,
  eagerness: null,
  unjudgedSilenceMs: FIXED_SILENCE_MS,
};
/** VAD cost controls (docs/realtime.md, "Server VAD"): gate, state pool, batching, speech hold. */
export const VAD_TUNING = {
  gateDbfs: -50,
  poolWarm: 2,
  poolMax: 512,
  releaseAfterMs: 3_000,
  batchWaitMs: 20,
  batchWindows: 64,
  holdDb: 6,
  maxSkip: 4,
  quietDb: 6,
  candidateGapMs: 500,
} as const;

export function realtimeConfig(env: Env): RealtimeConfig {
  const leaseTtlMs = int(env, 'REALTIME_LEASE_TTL_MS', 15_000, 1000);
  return {
    host: str(env, 'REALTIME_HOST', '0.0.0.0'),
    port: int(env, 'REALTIME_PORT', 8081, 0),
    enabled: bool(env, 'REALTIME_ENABLED', true),
    maxFrameBytes: MAX_FRAME_BYTES,
    maxMessageBytes: MAX_MESSAGE_BYTES,
    upstreamSoftBytes: UPSTREAM_SOFT_BYTES,
    upstreamHardBytes: UPSTREAM_HARD_BYTES,
    clientBackpressureBytes: CLIENT_BACKPRESSURE_BYTES,
    leaseTtlMs,
    // Three renewals per TTL: a lease survives one late renewal.
    leaseRenewMs: Math.max(100, Math.floor(leaseTtlMs / 3)),
    tickMs: TICK_MS,
    revocationCheckMs: REVOCATION_CHECK_MS,
    closeDrainMs: int(env, 'REALTIME_CLOSE_DRAIN_MS', 10_000, 0),
    overload: {
      maxSessions: int(env, 'REALTIME_MAX_SESSIONS', 500, 0),
      maxQueuedUtterances: int(env, 'REALTIME_MAX_QUEUED_UTTERANCES', 64, 0),
      retryAfterSeconds: OVERLOAD_RETRY_AFTER_SECONDS,
      maxAuthenticating: MAX_AUTHENTICATING,
      maxAuthenticatingPerSource: MAX_AUTHENTICATING_PER_SOURCE,
      ownerSharePercent: int(env, 'REALTIME_OWNER_SHARE', 80, 1, 100),
    },
    breaker: { failureThreshold: BREAKER_FAILURES, openMs: BREAKER_OPEN_MS },
    transcribeTimeoutMs: int(env, 'REALTIME_TRANSCRIBE_TIMEOUT_MS', 30_000, 100),
    vadDefaults: { ...VAD_DEFAULTS },
    vad: {
      threads: int(env, 'REALTIME_VAD_THREADS', Math.max(1, os.availableParallelism() - 1), 0),
      modelPath: sileroModelPath(),
      ...VAD_TUNING,
    },
    maxSpeechMsCap: MAX_SPEECH_MS_CAP,
    requireNativeUws: true,
    // Set by the embedded start (scripts/start.ts) to the realtime process it runs.
    upstreamProxyTarget: undefined,
    readyUrls: list(env, 'REALTIME_READY_URLS'),
  };
}
