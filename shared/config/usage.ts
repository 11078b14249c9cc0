import path from 'node:path';
import { type Env, str } from './env.js';

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

// Internal tuning of the usage ledger (not environment variables; docs/decisions.md, "Configuration surface").
/** A usage write slower than this goes to the spool. */
export const USAGE_WRITE_TIMEOUT_MS = 5000;
/** Backoff between replays of the spool. */
export const USAGE_RETRY_MIN_MS = 250;
export const USAGE_RETRY_MAX_MS = 10_000;
/** Spool size at which new billable work is refused (503 `usage_unavailable`) instead of served unbilled. */
export const USAGE_SPOOL_MAX_UNITS = 200_000;
/** A spool file untouched this long belongs to a dead process (at least 3 x the longest replay backoff). */
export const USAGE_SPOOL_ORPHAN_MS = 120_000;

/**
 * The ledger's lease is the realtime tier's connection lease (REALTIME_LEASE_TTL_MS):
 * a killed instance's sessions lapse when its connection slots free. Checkpoints
 * and sweeps run at least three times per lease.
 */
export function usageLedgerConfig(env: Env, dataDir: string, leaseTtlMs: number): UsageLedgerConfig {
  return {
    checkpointMs: Math.max(100, Math.min(2000, Math.floor(leaseTtlMs / 3))),
    leaseTtlMs,
    sweepMs: Math.max(50, Math.min(5000, Math.ceil(leaseTtlMs / 3))),
    writeTimeoutMs: USAGE_WRITE_TIMEOUT_MS,
    retryMinMs: USAGE_RETRY_MIN_MS,
    retryMaxMs: USAGE_RETRY_MAX_MS,
    spoolDir: path.resolve(str(env, 'USAGE_SPOOL_DIR', path.join(dataDir, 'usage-spool'))),
    spoolMaxUnits: USAGE_SPOOL_MAX_UNITS,
    spoolOrphanMs: USAGE_SPOOL_ORPHAN_MS,
  };
}
