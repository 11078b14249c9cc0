import path from 'node:path';
import { type Env, ConfigError, str, int } from './env.js';

/** The usage ledger (shared/usage): checkpoints, leases and the spool used while Postgres is down. */
export interface UsageLedgerConfig {
  /** A live realtime session's audio is checkpointed this often (at most this much audio is unbilled if its process dies). */
  checkpointMs: number;
  /** A checkpoint holds the session's ledger row `live` this long; an unrenewed row turns `lapsed`. */
  leaseTtlMs: number;
  /** How often each process lapses expired rows and adopts orphaned spool files. */
  sweepMs: number;
  /** A write slower than this is spooled (and retried from the spool). */
  writeTimeoutMs: number;
  /** Backoff between replays of the spool: from min, doubling, to max; forever. */
  retryMinMs: number;
  retryMaxMs: number;
  /** Directory of the append-only spool files (one per process). */
  spoolDir: string;
  /** Units held in the spool beyond which new billable work is refused (503) rather than served unbilled. */
  spoolMaxUnits: number;
  /** A spool file nobody has touched this long belongs to a dead process: any process replays it. */
  spoolOrphanMs: number;
}

export function usageLedgerConfig(env: Env, dataDir: string): UsageLedgerConfig {
  // One lease TTL by default is the realtime tier's: a killed instance's sessions lapse when its connection slots free.
  const leaseTtlMs = int(env, 'USAGE_LEASE_TTL_MS', int(env, 'REALTIME_LEASE_TTL_MS', 15_000, 1000), 200);
  // At least three checkpoints (lease renewals) per lease TTL unless set otherwise.
  const checkpointMs = int(
    env,
    'USAGE_CHECKPOINT_MS',
    Math.max(100, Math.min(2000, Math.floor(leaseTtlMs / 3))),
    100,
  );
  if (leaseTtlMs <= checkpointMs) {
    throw new ConfigError(
      `USAGE_LEASE_TTL_MS (${leaseTtlMs}) must be longer than USAGE_CHECKPOINT_MS (${checkpointMs})`,
    );
  }
  const retryMaxMs = int(env, 'USAGE_RETRY_MAX_MS', 10_000, 10);
  const spoolOrphanMs = int(env, 'USAGE_SPOOL_ORPHAN_MS', 120_000, 1000);
  if (spoolOrphanMs < 3 * retryMaxMs) {
    throw new ConfigError(
      `USAGE_SPOOL_ORPHAN_MS (${spoolOrphanMs}) must be at least 3 x USAGE_RETRY_MAX_MS (${retryMaxMs})`,
    );
  }
  return {
    checkpointMs,
    leaseTtlMs,
    sweepMs: int(env, 'USAGE_SWEEP_MS', Math.min(5000, Math.ceil(leaseTtlMs / 3)), 50),
    writeTimeoutMs: int(env, 'USAGE_WRITE_TIMEOUT_MS', 5000, 50),
    retryMinMs: Math.min(int(env, 'USAGE_RETRY_MIN_MS', 250, 10), retryMaxMs),
    retryMaxMs,
    spoolDir: path.resolve(str(env, 'USAGE_SPOOL_DIR', path.join(dataDir, 'usage-spool'))),
    spoolMaxUnits: int(env, 'USAGE_SPOOL_MAX_UNITS', 200_000, 1),
    spoolOrphanMs,
  };
}
