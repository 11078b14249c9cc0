import os from 'node:os';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Env, str, int, num, bool, list } from './env.js';
import type { SegmenterSettings } from '../vad/segmenter.js';

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
    /** Speech hold (see shared/vad/segmenter.ts): dB above the noise floor that skips the model mid-speech; 0 = off. */
    holdDb: number;
    /** At most this many consecutive windows skipped by the hold. */
    maxSkip: number;
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
  overload: { maxSessions: number; maxQueuedUtterances: number; retryAfterSeconds: number };
  /** Refuse to start on the pure-JS fallback of uWebSockets.js. */
  requireNativeUws: boolean;
  /** Where the API proxies upgrades to in embedded mode (host:port of this process). */
  upstreamProxyTarget: string | undefined;
  /**
   * The realtime instances' readiness URLs the API's /readyz checks (interface
   * 4.2: ready when realtime traffic can be accepted, so when any answers 200).
   * REALTIME_READY_URLS, else the proxy target's /readyz, else none.
   */
  readyUrls: string[];
}

function readyUrls(env: Env): string[] {
  const given = list(env, 'REALTIME_READY_URLS');
  if (given.length) return given;
  const target = str(env, 'REALTIME_PROXY_TARGET');
  return target ? [`http://${target}/readyz`] : [];
}

export function realtimeConfig(env: Env): RealtimeConfig {
  return {
    host: str(env, 'REALTIME_HOST', '0.0.0.0'),
    port: int(env, 'REALTIME_PORT', 8081, 0),
    enabled: bool(env, 'REALTIME_ENABLED', true),
    maxFrameBytes: int(env, 'REALTIME_MAX_FRAME_BYTES', 1024 * 1024, 1),
    maxMessageBytes: int(env, 'REALTIME_MAX_MESSAGE_BYTES', 8 * 1024 * 1024, 1024),
    upstreamSoftBytes: int(env, 'REALTIME_UPSTREAM_SOFT_BYTES', 1024 * 1024, 1),
    upstreamHardBytes: int(env, 'REALTIME_UPSTREAM_HARD_BYTES', 8 * 1024 * 1024, 1),
    clientBackpressureBytes: int(env, 'REALTIME_CLIENT_BACKPRESSURE_BYTES', 1024 * 1024, 1),
    leaseTtlMs: int(env, 'REALTIME_LEASE_TTL_MS', 15_000, 1000),
    leaseRenewMs: int(env, 'REALTIME_LEASE_RENEW_MS', 5_000, 100),
    tickMs: int(env, 'REALTIME_TICK_MS', 1000, 10),
    closeDrainMs: int(env, 'REALTIME_CLOSE_DRAIN_MS', 10_000, 0),
    overload: {
      maxSessions: int(env, 'REALTIME_MAX_SESSIONS', 500, 0),
      maxQueuedUtterances: int(env, 'REALTIME_MAX_QUEUED_UTTERANCES', 64, 0),
      retryAfterSeconds: int(env, 'REALTIME_OVERLOAD_RETRY_AFTER_SECONDS', 2, 1),
    },
    breaker: {
      failureThreshold: int(env, 'REALTIME_BREAKER_FAILURES', 5, 1),
      openMs: int(env, 'REALTIME_BREAKER_OPEN_MS', 10_000, 100),
    },
    transcribeTimeoutMs: int(env, 'REALTIME_TRANSCRIBE_TIMEOUT_MS', 30_000, 100),
    vadDefaults: {
      vad: bool(env, 'REALTIME_VAD', true),
      threshold: num(env, 'REALTIME_VAD_THRESHOLD', 0.5, 0),
      silenceMs: int(env, 'REALTIME_VAD_SILENCE_MS', 500, 0),
      prefixMs: int(env, 'REALTIME_VAD_PREFIX_MS', 300, 0),
      minSpeechMs: int(env, 'REALTIME_VAD_MIN_SPEECH_MS', 250, 0),
      targetSpeechMs: int(env, 'REALTIME_VAD_TARGET_SPEECH_MS', 15_000, 0),
      maxSpeechMs: int(env, 'REALTIME_VAD_MAX_SPEECH_MS', 30_000, 1000),
      smartSplitWindowMs: int(env, 'REALTIME_VAD_SMART_SPLIT_WINDOW_MS', 2_000, 0),
    },
    vad: {
      threads: int(env, 'REALTIME_VAD_THREADS', Math.max(1, os.availableParallelism() - 1), 0),
      modelPath: str(env, 'REALTIME_VAD_MODEL', sileroModelPath()),
      gateDbfs: num(env, 'REALTIME_VAD_GATE_DBFS', -50),
      poolWarm: int(env, 'REALTIME_VAD_POOL_WARM', 2, 0),
      poolMax: int(env, 'REALTIME_VAD_POOL_MAX', 512, 0),
      releaseAfterMs: int(env, 'REALTIME_VAD_RELEASE_MS', 3_000, 0),
      batchWaitMs: int(env, 'REALTIME_VAD_BATCH_WAIT_MS', 20, 0),
      batchWindows: int(env, 'REALTIME_VAD_BATCH_WINDOWS', 64, 1),
      holdDb: num(env, 'REALTIME_VAD_HOLD_DB', 6, 0),
      maxSkip: int(env, 'REALTIME_VAD_MAX_SKIP', 4, 0),
    },
    maxSpeechMsCap: int(env, 'REALTIME_MAX_SPEECH_MS_CAP', 60_000, 1000),
    requireNativeUws: bool(env, 'REALTIME_REQUIRE_NATIVE_UWS', true),
    upstreamProxyTarget: str(env, 'REALTIME_PROXY_TARGET'),
    readyUrls: readyUrls(env),
  };
}
