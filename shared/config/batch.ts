import path from 'node:path';
import { type Env, ConfigError, str, int, num, bool, list } from './env.js';
import { diskFloorBytes } from './platform.js';

/** Outbound fetch safety (audio downloads and webhook deliveries). */
export interface OutboundConfig {
  /**
   * Destinations allowed even though they are loopback/private/link-local:
   * CIDRs (`127.0.0.1/32`, `10.0.0.0/8`) or host names (`localhost`). Empty by
   * default, so a URL that resolves to a non-public address is refused.
   */
  allow: string[];
  maxRedirects: number;
  connectTimeoutMs: number;
}

export interface ArtifactStoreConfig {
  driver: 'fs' | 's3';
  /** Root directory of the filesystem driver. */
  dir: string;
  s3: {
    endpoint: string | undefined;
    region: string;
    bucket: string;
    accessKeyId: string | undefined;
    secretAccessKey: string | undefined;
    forcePathStyle: boolean;
    /** Per request: connecting, and then the whole request (a hung store must not hang a workflow). */
    connectTimeoutMs: number;
    requestTimeoutMs: number;
  };
  /** Prepended to every physical key (both drivers). */
  prefix: string;
}

export interface ReviewerConfig {
  /** OpenAI-compatible base URL (…/v1); unset = offline review only. */
  url: string | undefined;
  model: string;
  apiKey: string | undefined;
  /** Which review stages the remote reviewer replaces: `annotate`, `correct`. */
  stages: ('annotate' | 'correct')[];
  timeoutMs: number;
  /** Words below this engine confidence are flagged by the offline annotator. */
  lowConfidence: number;
  /** Most distinct terms a job's `metadata` may hold (more: 400 at submission). */
  maxTerms: number;
}

/** Bounds of a job's `metadata` (checked at submission; decisions: Batch input limits). */
export interface MetadataLimits {
  /** Serialized size in bytes. */
  maxBytes: number;
  /** Levels of nesting below `metadata` itself. */
  maxDepth: number;
}

export interface WebhookConfig {
  /** Standard Webhooks secret (`whsec_` + base64). Unset: generated once and kept in DATA_DIR. */
  secret: string | undefined;
  secretFile: string;
  timeoutMs: number;
  maxAttempts: number;
  baseDelaySeconds: number;
  maxDelaySeconds: number;
  /** Deliveries in flight per API process (one tenant at most half of them), and at most this many to one tenant's receiver (host and port). */
  concurrency: number;
  perReceiver: number;
  /**
   * A delivery that should have been attempted this long ago but left no
   * record (its process died between finishing the job and queueing the
   * delivery, or between two attempts) is queued again by the sweeper.
   */
  recoverAfterSeconds: number;
}

export interface BatchConfig {
  /** Run the pg-boss workers in this process (the producer side always runs). */
  workersEnabled: boolean;
  pgBossSchema: string;
  /** Workflows one process runs at the same time. */
  workflowsPerProcess: number;
  /** Upper bound on a job's `concurrency` (chunks transcribed at once). */
  maxConcurrency: number;
  /** Shortest accepted segment_seconds (tiny slices only waste engine calls). */
  minSegmentSeconds: number;
  /** How far from each boundary the slicer may move a cut to find a pause (cap). */
  sliceSearchSeconds: number;
  /**
   * Send each chunk to the engine one utterance at a time (split at pauses
   * inside the chunk). Right for PocketSphinx, which decodes one utterance
   * per call best; turn off for long-context engines (Whisper workers).
   */
  splitUtterances: boolean;
  utteranceMinPauseSeconds: number;
  utteranceMaxSeconds: number;
  /** A pause ends an utterance piece only once it is at least this long (0 = every pause; default 5 s, docs/decisions.md). */
  utteranceMinSeconds: number;
  /** A shorter piece goes on through a pause into the same voice and channel (default 10 s; api/batch/pieces.ts). */
  utteranceJoinSeconds: number;
  /** Spectral shapes closer than this (dB RMS) are the same voice and channel (shared/audio/channel.ts). */
  utteranceSameChannelDb: number;
  /**
   * pg-boss heartbeat of a run's job (queue `heartbeatSeconds`, at least
   * 10): a job whose worker stopped heart-beating this long is failed and
   * retried by pg-boss, so a dead process's workflow resumes elsewhere.
   */
  heartbeatSeconds: number;
  /** How often pg-boss's supervisor of this process looks for such jobs (monitor and supervise interval). */
  superviseSeconds: number;
  /** How often finished workflows past retention and lost webhook deliveries are looked for. */
  sweepIntervalMs: number;
  /**
   * Engine calls the batch workers of one process keep in flight at most
   * (0 = as many as the built-in engine has decoder threads, 16 for a
   * remote pool). Extra calls wait here, where no engine timeout runs.
   */
  engineSlots: number;
  /** Attempts per chunk for retryable engine errors. */
  chunkAttempts: number;
  /**
   * Per-attempt timeout of a remote speech pool for batch audio: base +
   * per audio second of each piece sent (batch pieces are far longer than
   * the segment and realtime clips that STT_ATTEMPT_TIMEOUT_MS is made for).
   */
  engineTimeoutBaseMs: number;
  engineTimeoutPerAudioSecondMs: number;
  /** Audio download caps. */
  maxAudioBytes: number;
  fetchTimeoutMs: number;
  /** A download slower than this fails at once (`too_slow`), not at fetchTimeoutMs. */
  fetchMinRate: { bytes: number; windowMs: number };
  /** Workflows of one tenant (owner) running at once across every process; more wait their turn. */
  maxRunningPerTenant: number;
  /**
   * A workflow whose runs have stopped this many worker processes (their
   * leases lapsed and were taken over) is errored with
   * `workflow_quarantined` instead of run again: a poisoned job cannot take
   * down one API process after another.
   */
  quarantineAfterCrashes: number;
  /** Chunk audio (PCM) one process holds in memory at once, over all its runs (a larger chunk runs alone). */
  chunkMemoryBytes: number;
  /** Unfinished (queued or running) workflows one tenant may have; more are refused 429 `too_many_jobs`. */
  maxUnfinishedPerTenant: number;
  /**
   * Finished workflows (their rows, steps, deliveries and, for the latest
   * of a request_id, its artifacts) are deleted this long after they ended;
   * 0 keeps them for ever.
   */
  retentionSeconds: number;
  /** Where audio is kept while a job runs (deleted afterwards). */
  tmpDir: string;
  /** A run waits for this much free space before it downloads (DISK_FLOOR_MB, shared with the API). */
  diskFloorBytes: number;
  storage: ArtifactStoreConfig;
  outbound: OutboundConfig;
  review: ReviewerConfig;
  metadata: MetadataLimits;
  webhook: WebhookConfig;
}

const REVIEW_STAGES = new Set(['annotate', 'correct']);

// Internal tuning of the batch plane (not environment variables; docs/decisions.md, "Configuration surface").
/**
 * Postgres schema of pg-boss: its own for each major version, so that a new
 * major never migrates an existing schema in place by surprise (pg-boss 10
 * used `pgboss`; docs/decisions/batch.md, "pg-boss 12").
 */
export const PGBOSS_SCHEMA = 'pgboss_v12';
/** pg-boss refuses a heartbeat under 10 s. */
const MIN_HEARTBEAT_SECONDS = 10;
/** How often retention and lost webhook deliveries are looked for. */
const SWEEP_INTERVAL_MS = 10_000;
/** Shortest accepted segment_seconds (tiny slices only waste engine calls); smaller ones are raised to it. */
export const MIN_SEGMENT_SECONDS = 2;
/** 64 MiB of 16 kHz PCM16 is about 35 minutes of audio: a few chunks of the default 300 s each. */
const CHUNK_MEMORY_BYTES = 64 * 1024 * 1024;
/** Crashed runs after which a workflow is quarantined (BatchConfig.quarantineAfterCrashes). */
const QUARANTINE_AFTER_CRASHES = 2;
/** How far from each boundary the slicer may move a cut to find a pause. */
export const SLICE_SEARCH_SECONDS = 10;
/** Utterance pieces of a chunk (BATCH_SPLIT_UTTERANCES): separating pause, longest piece, shortest piece a pause may end (docs/decisions.md). */
export const UTTERANCE_MIN_PAUSE_SECONDS = 0.4;
export const UTTERANCE_MAX_SECONDS = 30;
export const UTTERANCE_MIN_SECONDS = 5;
/** A piece shorter than this goes on through a pause into the same voice and channel; what counts as the same (dB). */
export const UTTERANCE_JOIN_SECONDS = 10;
export const UTTERANCE_SAME_CHANNEL_DB = 6;
/** Attempts per chunk for retryable engine errors. */
export const CHUNK_ATTEMPTS = 3;
/**
 * An audio_url download must bring at least this much per second, measured
 * over each FETCH_RATE_WINDOW_MS (a server that stalls or trickles fails in
 * seconds instead of holding a workflow slot for BATCH_FETCH_TIMEOUT_MS).
 */
export const FETCH_MIN_BYTES_PER_SECOND = 4096;
export const FETCH_RATE_WINDOW_MS = 15_000;
/** Per S3 request: connecting, and then the whole request (a hung store must not hang a workflow). */
export const S3_CONNECT_TIMEOUT_MS = 5_000;
export const S3_REQUEST_TIMEOUT_MS = 30_000;
/** Outbound fetches (audio, webhooks): redirects followed, connect timeout. */
export const OUTBOUND_MAX_REDIRECTS = 5;
export const OUTBOUND_CONNECT_TIMEOUT_MS = 10_000;
/** Webhook delivery: per-attempt timeout, and when an overdue unrecorded delivery is queued again. */
export const WEBHOOK_TIMEOUT_MS = 10_000;
/** Deliveries in flight per process, and to one receiver (a slow receiver holds only its own share). */
const WEBHOOK_CONCURRENCY = 8;
const WEBHOOK_PER_RECEIVER = 2;
export const WEBHOOK_RECOVER_AFTER_SECONDS = 300;
/** Words below this engine confidence are flagged by the offline annotator. */
export const REVIEW_LOW_CONFIDENCE = 0.5;
/** Most distinct terms a job's `metadata` may hold (more: 400 at submission). */
export const REVIEW_MAX_TERMS = 1000;
/** Deepest nesting of a job's `metadata` (more: 400 at submission). */
export const METADATA_MAX_DEPTH = 8;

export function batchConfig(env: Env): BatchConfig {
  const dataDir = path.resolve(str(env, 'DATA_DIR', '.data'));
  const driver = str(env, 'ARTIFACT_STORE', str(env, 'S3_BUCKET') ? 's3' : 'fs');
  if (driver !== 'fs' && driver !== 's3')
    throw new ConfigError(`ARTIFACT_STORE must be "fs" or "s3", got "${driver}"`);
  const stages = list(env, 'REVIEW_STAGES');
  for (const s of stages)
    if (!REVIEW_STAGES.has(s))
      throw new ConfigError(`REVIEW_STAGES entries must be annotate or correct, got "${s}"`);
  let prefix = str(env, 'ARTIFACT_PREFIX', '');
  const heartbeatSeconds = int(env, 'BATCH_HEARTBEAT_SECONDS', 30, MIN_HEARTBEAT_SECONDS);
  if (prefix && !prefix.endsWith('/')) prefix += '/';
  return {
    workersEnabled: bool(env, 'BATCH_WORKERS', true),
    pgBossSchema: PGBOSS_SCHEMA,
    workflowsPerProcess: int(env, 'BATCH_WORKFLOWS_PER_PROCESS', 2, 1),
    maxConcurrency: int(env, 'BATCH_MAX_CONCURRENCY', 16, 1),
    minSegmentSeconds: MIN_SEGMENT_SECONDS,
    sliceSearchSeconds: SLICE_SEARCH_SECONDS,
    splitUtterances: bool(env, 'BATCH_SPLIT_UTTERANCES', true),
    utteranceMinPauseSeconds: UTTERANCE_MIN_PAUSE_SECONDS,
    utteranceMaxSeconds: UTTERANCE_MAX_SECONDS,
    utteranceMinSeconds: UTTERANCE_MIN_SECONDS,
    utteranceJoinSeconds: UTTERANCE_JOIN_SECONDS,
    utteranceSameChannelDb: UTTERANCE_SAME_CHANNEL_DB,
    heartbeatSeconds,
    // Three looks per heartbeat: a dead run is failed (and retried) within about 1.3 heartbeats.
    superviseSeconds: Math.max(1, Math.min(10, Math.floor(heartbeatSeconds / 3))),
    sweepIntervalMs: SWEEP_INTERVAL_MS,
    engineSlots: int(env, 'BATCH_ENGINE_SLOTS', 0, 0),
    chunkAttempts: CHUNK_ATTEMPTS,
    engineTimeoutBaseMs: int(env, 'BATCH_STT_ATTEMPT_TIMEOUT_BASE_MS', 30_000, 1),
    engineTimeoutPerAudioSecondMs: int(env, 'BATCH_STT_ATTEMPT_TIMEOUT_PER_AUDIO_SECOND_MS', 1000, 0),
    maxAudioBytes: int(env, 'BATCH_MAX_AUDIO_BYTES', 1024 * 1024 * 1024, 1),
    fetchTimeoutMs: int(env, 'BATCH_FETCH_TIMEOUT_MS', 10 * 60_000, 100),
    fetchMinRate: {
      bytes: FETCH_MIN_BYTES_PER_SECOND * (FETCH_RATE_WINDOW_MS / 1000),
      windowMs: FETCH_RATE_WINDOW_MS,
    },
    maxRunningPerTenant: int(env, 'BATCH_MAX_RUNNING_PER_TENANT', 1, 1),
    quarantineAfterCrashes: QUARANTINE_AFTER_CRASHES,
    chunkMemoryBytes: CHUNK_MEMORY_BYTES,
    maxUnfinishedPerTenant: int(env, 'BATCH_MAX_UNFINISHED_PER_TENANT', 1000, 1),
    retentionSeconds: num(env, 'BATCH_RETENTION_DAYS', 30, 0) * 86_400,
    tmpDir: path.resolve(str(env, 'BATCH_TMP_DIR', path.join(dataDir, 'tmp', 'batch'))),
    diskFloorBytes: diskFloorBytes(env),
    storage: {
      driver,
      dir: path.resolve(str(env, 'ARTIFACT_DIR', path.join(dataDir, 'artifacts'))),
      s3: {
        endpoint: str(env, 'S3_ENDPOINT'),
        region: str(env, 'S3_REGION', 'us-east-1'),
        bucket: str(env, 'S3_BUCKET', 'transcriptions'),
        accessKeyId: str(env, 'S3_ACCESS_KEY_ID'),
        secretAccessKey: str(env, 'S3_SECRET_ACCESS_KEY'),
        forcePathStyle: bool(env, 'S3_FORCE_PATH_STYLE', true),
        connectTimeoutMs: S3_CONNECT_TIMEOUT_MS,
        requestTimeoutMs: S3_REQUEST_TIMEOUT_MS,
      },
      prefix,
    },
    outbound: {
      allow: list(env, 'OUTBOUND_ALLOW'),
      maxRedirects: OUTBOUND_MAX_REDIRECTS,
      connectTimeoutMs: OUTBOUND_CONNECT_TIMEOUT_MS,
    },
    review: {
      url: str(env, 'REVIEW_API_URL'),
      model: str(env, 'REVIEW_MODEL', 'gpt-4o-mini'),
      apiKey: str(env, 'REVIEW_API_KEY'),
      stages: (stages.length ? stages : ['annotate', 'correct']) as ('annotate' | 'correct')[],
      timeoutMs: int(env, 'REVIEW_TIMEOUT_MS', 60_000, 100),
      lowConfidence: REVIEW_LOW_CONFIDENCE,
      maxTerms: REVIEW_MAX_TERMS,
    },
    metadata: {
      maxBytes: int(env, 'BATCH_METADATA_MAX_BYTES', 64 * 1024, 2, 16 * 1024 * 1024),
      maxDepth: METADATA_MAX_DEPTH,
    },
    webhook: {
      secret: str(env, 'WEBHOOK_SECRET'),
      secretFile: path.join(dataDir, 'webhook-secret'),
      timeoutMs: WEBHOOK_TIMEOUT_MS,
      maxAttempts: int(env, 'WEBHOOK_MAX_ATTEMPTS', 12, 1),
      baseDelaySeconds: num(env, 'WEBHOOK_BASE_DELAY_SECONDS', 30, 0),
      maxDelaySeconds: num(env, 'WEBHOOK_MAX_DELAY_SECONDS', 3 * 3600, 0),
      concurrency: WEBHOOK_CONCURRENCY,
      perReceiver: WEBHOOK_PER_RECEIVER,
      recoverAfterSeconds: WEBHOOK_RECOVER_AFTER_SECONDS,
    },
  };
}
