/**
 * The composition root of the API process: every dependency a route, the
 * batch plane or the server needs is built here, once, from the config —
 * the database, the plan catalog, key store and authenticator, the limits
 * driver, the usage ledger and audio budget, the speech engine, the batch runtime, the
 * realtime upstream and every readiness check. Nothing below adds to or
 * replaces what is built here: routes and runtimes receive it.
 *
 * api/main.ts and scripts/start.ts (through startApi), the batch worker of
 * the crash test and every test app build their dependencies with
 * `createDeps`.
 */
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { pingDb } from '../shared/db/index.js';
import { createPlatform, type Platform } from '../shared/platform.js';
import { createArtifactStore, type ArtifactStore } from './batch/storage/index.js';
import { OutboundClient } from './batch/net/index.js';
import { BatchRuntime } from './batch/runtime.js';
import type { RunnerHooks } from './batch/workflow.js';
import { type ReadinessCheck, realtimeReadiness } from './http/readiness.js';
import os from 'node:os';
import { DiskFloor } from '../shared/disk.js';

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

/** The platform (shared/platform.ts) and what the API adds on top of it. */
export interface AppDeps extends Omit<Platform, 'close'> {
  /** The shared resources this API was built on (closed last, by closeDeps). */
  readonly platform: Platform;
  /** The batch plane: queues, workers, sweeper; started and stopped by the server. */
  readonly batch: BatchRuntime;
  /** Set when this API serves the realtime stream on its own base URL (embedded start). */
  readonly realtimeUpstream: RealtimeUpstream | undefined;
  readonly intake: Intake;
  /** Every check of /readyz, in the order its `checks` object lists them. */
  readonly readiness: readonly ReadinessCheck[];
  /** Free space of the data and temp directories against DISK_FLOOR_MB. */
  readonly diskFloor: DiskFloor;
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
  const platform = createPlatform(config, logger);
  const { db, ledger, budget, speech, limits } = platform;
  const batch = new BatchRuntime({
    config,
    logger,
    db,
    budget,
    speech,
    store: opts.store ?? createArtifactStore(config.batch.storage),
    outbound: new OutboundClient(config.batch.outbound.allow, config.batch.outbound),
    hooks: opts.hooks,
  });
  const intake = new Intake();
  const readyUrls = config.realtime.readyUrls;
  const diskFloor = new DiskFloor([config.dataDir, os.tmpdir()], config.diskFloorBytes);
  const readiness: ReadinessCheck[] = [
    { name: 'database', check: () => pingDb(db) },
    ...(limits.kind === 'redis' ? [{ name: 'redis', check: () => limits.ping() }] : []),
    ...(readyUrls.length ? [{ name: 'realtime', check: realtimeReadiness(readyUrls) }] : []),
    { name: 'speech', check: () => speech.healthy() },
    { name: 'accepting', check: () => Promise.resolve(intake.accepting) },
    ...(config.diskFloorBytes > 0
      ? [{ name: 'disk', check: async () => (await diskFloor.below()) === undefined }]
      : []),
    ...(opts.readiness ?? []),
  ];
  return {
    config,
    logger,
    db,
    plans: platform.plans,
    keys: platform.keys,
    auth: platform.auth,
    limits,
    ledger,
    budget,
    speech,
    platform,
    batch,
    realtimeUpstream: realtimeUpstream(config),
    intake,
    readiness,
    diskFloor,
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

/** Closes what createDeps opened: the batch plane first (its workers use the pools), then the platform. */
export async function closeDeps(deps: AppDeps): Promise<void> {
  await deps.batch.stop().catch((err) => deps.logger.warn({ err }, 'error while closing'));
  await deps.platform.close();
}
