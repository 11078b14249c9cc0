/**
 * The composition root of the API process: every dependency a route, the
 * batch plane or the server needs is built here, once, from the config —
 * the database, the plan catalog, key store and authenticator, the limits
 * driver, the usage ledger, the speech engine, the batch runtime, the
 * realtime upstream and every readiness check. Nothing below adds to or
 * replaces what is built here: routes and runtimes receive it.
 *
 * api/main.ts and scripts/start.ts (through startApi), the batch worker of
 * the crash test and every test app build their dependencies with
 * `createDeps`.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { createDb, pingDb } from '../shared/db/index.js';
import type { PlanCatalog } from '../shared/plans.js';
import { type Authenticator, type KeyStore, createAuthentication } from '../shared/auth/index.js';
import { createLimits, type LimitsDriver } from '../shared/limits/index.js';
import type { ArtifactStore } from '../shared/storage/index.js';
import { createSpeechEngine } from '../shared/stt/index.js';
import { UsageLedger } from '../shared/usage.js';
import { BatchRuntime } from './batch/runtime.js';
import type { RunnerHooks } from './batch/workflow.js';
import { type ReadinessCheck, realtimeReadiness } from './http/readiness.js';

export type { ReadinessCheck };

/** The realtime process whose WebSocket upgrades the API splices through (REALTIME_PROXY_TARGET). */
export interface RealtimeUpstream {
  host: string;
  port: number;
  retryAfterSeconds: number;
}

/**
 * Whether this process still takes new work. The server turns it off when
 * its stop begins; /readyz then answers 503 (`accepting: false`) so that the
 * load balancer takes the instance out of rotation.
 */
export class Intake {
  private stopped = false;
  get accepting(): boolean {
    return !this.stopped;
  }
  stop(): void {
    this.stopped = true;
  }
}

export interface AppDeps {
  readonly config: Config;
  readonly logger: Logger;
  readonly db: Knex;
  readonly plans: PlanCatalog;
  readonly keys: KeyStore;
  readonly auth: Authenticator;
  readonly limits: LimitsDriver;
  /** Billing of every plane (segment, batch) in this process. */
  readonly ledger: UsageLedger;
  /** The speech engine of this process (segment route, batch workers, job language check). */
  readonly speech: ReturnType<typeof createSpeechEngine>;
  /** The batch plane: queues, workers, sweeper; started and stopped by the server. */
  readonly batch: BatchRuntime;
  /** Set when this API serves the realtime stream on its own base URL (embedded start). */
  readonly realtimeUpstream: RealtimeUpstream | undefined;
  readonly intake: Intake;
  /** Every check of /readyz, in the order its `checks` object lists them. */
  readonly readiness: readonly ReadinessCheck[];
}

/** What tests and benchmarks may replace or add; everything else comes from the config. */
export interface DepsOptions {
  /** The batch plane's artifact store (default: the configured one). */
  store?: ArtifactStore;
  /** Batch runner hooks (tests count engine calls with them). */
  hooks?: RunnerHooks;
  /** Extra readiness checks, listed after the built-in ones. */
  readiness?: ReadinessCheck[];
}

export function createDeps(config: Config, logger: Logger, opts: DepsOptions = {}): AppDeps {
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required (the embedded start provides one)');
  const db = createDb(config.databaseUrl, { poolMax: config.dbPoolMax, logger });
  const { plans, keys, auth } = createAuthentication(config, db, logger);
  const limits = createLimits(config.redisUrl);
  const ledger = new UsageLedger(db, config.ledger, logger).start();
  // Created now: decoders load at start-up rather than on the first request.
  const speech = createSpeechEngine(config, logger);
  const batch = new BatchRuntime({
    config,
    logger,
    db,
    ledger,
    speech,
    store: opts.store,
    hooks: opts.hooks,
  });
  const intake = new Intake();
  const readyUrls = config.realtime.readyUrls;
  const readiness: ReadinessCheck[] = [
    { name: 'database', check: () => pingDb(db) },
    ...(limits.kind === 'redis' ? [{ name: 'redis', check: () => limits.ping() }] : []),
    ...(readyUrls.length ? [{ name: 'realtime', check: realtimeReadiness(readyUrls) }] : []),
    { name: 'speech', check: () => speech.healthy() },
    { name: 'accepting', check: () => Promise.resolve(intake.accepting) },
    ...(opts.readiness ?? []),
  ];
  return {
    config,
    logger,
    db,
    plans,
    keys,
    auth,
    limits,
    ledger,
    speech,
    batch,
    realtimeUpstream: realtimeUpstream(config),
    intake,
    readiness,
  };
}

/**
 * With REALTIME_PROXY_TARGET (host:port), the API also serves the realtime
 * stream on its own base URL by splicing upgrades through to the realtime
 * process (and /readyz checks that process's /readyz). The embedded start uses
 * this; a scaled deployment routes the stream path at its load balancer.
 */
function realtimeUpstream(config: Config): RealtimeUpstream | undefined {
  const target = config.realtime.upstreamProxyTarget;
  if (!target) return undefined;
  const sep = target.lastIndexOf(':');
  return {
    host: sep > 0 ? target.slice(0, sep) : '127.0.0.1',
    port: Number(target.slice(sep + 1)),
    retryAfterSeconds: config.failure.realtimeRetryAfterSeconds,
  };
}

/** Closes what createDeps opened, the batch plane first (its workers use the pools), the database last. */
export async function closeDeps(deps: AppDeps): Promise<void> {
  await deps.batch.stop().catch((err) => deps.logger.warn({ err }, 'error while closing'));
  await deps.ledger.close().catch(() => {});
  await deps.auth.close().catch(() => {});
  await deps.limits.close().catch(() => {});
  await deps.speech.close().catch(() => {});
  await deps.db.destroy().catch(() => {});
}
