/**
 * The ledger's SQL on `usage_events`: one row per billable unit, keyed by
 * (plane, ref_id). Every write is an idempotent upsert, so a replayed or
 * retried batch never bills twice:
 *
 * - a checkpoint (`live`) only grows the row (GREATEST of audio seconds and
 *   lease) and never touches a final row;
 * - a final write sets the unit's exact audio seconds once (the first final
 *   wins; later ones, and later checkpoints, change nothing);
 * - `lapseExpired` closes live rows whose lease ran out (their process died):
 *   their last checkpoint is what is billed.
 */
import { billedInWindow } from './budget.js';
import type { Knex } from 'knex';

export type Plane = 'segment' | 'realtime' | 'batch';

export interface UsageUnit {
  keyId: string;
  plane: Plane;
  /** Request id, session id or workflow id; unique per plane. */
  refId: string;
  audioSeconds: number;
}

/** A unit as the ledger writes (and spools) it. */
export interface LedgerEntry extends UsageUnit {
  kind: 'live' | 'final';
  /** When the entry was made (ms since the epoch): a spooled entry keeps its time. */
  at: number;
}

export const entryKey = (e: { plane: string; refId: string }): string => `${e.plane}\u0000${e.refId}`;

/**
 * Several entries of one unit in one batch (a statement may not upsert a row
 * twice): a final one wins over checkpoints, else the largest checkpoint.
 */
export function compact(entries: Iterable<LedgerEntry>): Map<string, LedgerEntry> {
  const out = new Map<string, LedgerEntry>();
  for (const e of entries) {
    const k = entryKey(e);
    const prev = out.get(k);
    if (!prev || supersedes(e, prev)) out.set(k, e);
  }
  return out;
}

function supersedes(next: LedgerEntry, prev: LedgerEntry): boolean {
  if (prev.kind === 'final') return false;
  if (next.kind === 'final') return true;
  return (
    next.audioSeconds > prev.audioSeconds || (next.audioSeconds === prev.audioSeconds && next.at > prev.at)
  );
}

/** Entries written as they are made take the database's clock; replayed ones keep their own time. */
const columns = (entries: LedgerEntry[], replayed: boolean) => [
  entries.map((e) => e.keyId),
  entries.map((e) => e.plane),
  entries.map((e) => e.refId),
  entries.map((e) => Math.max(0, e.audioSeconds)),
  // NULL elements (pg sends them as SQL NULL) take now() below.
  entries.map((e) => (replayed ? new Date(e.at).toISOString() : null)) as string[],
];

const UNNEST = `(SELECT key_id, plane, ref_id, audio_seconds, COALESCE(at, now()) AS at
    FROM unnest(?::text[], ?::text[], ?::text[], ?::float8[], ?::timestamptz[]) AS x(key_id, plane, ref_id, audio_seconds, at)) AS v`;

/** Closed units: rows that became final by this statement (plane and seconds, for the billed counter). */
export interface Closed {
  plane: Plane;
  audio_seconds: number;
}

async function writeFinal(db: Knex, entries: LedgerEntry[], replayed: boolean): Promise<Closed[]> {
  const r = await db.raw<{ rows: Closed[] }>(
    `INSERT INTO usage_events AS u (key_id, plane, ref_id, audio_seconds, status, created_at, updated_at)
     SELECT v.key_id, v.plane, v.ref_id, v.audio_seconds, 'final', v.at, now() FROM ${UNNEST}
     ON CONFLICT (plane, ref_id) DO UPDATE
       SET audio_seconds = EXCLUDED.audio_seconds, status = 'final', lease_expires_at = NULL, updated_at = now()
       WHERE u.status <> 'final'
     RETURNING u.plane, u.audio_seconds`,
    columns(entries, replayed),
  );
  return r.rows;
}

async function writeLive(
  db: Knex,
  entries: LedgerEntry[],
  leaseTtlMs: number,
  replayed: boolean,
): Promise<void> {
  // The lease runs from the checkpoint's own time: a checkpoint replayed from the spool long after
  // its session died is written lapsed, not live.
  await db.raw(
    `INSERT INTO usage_events AS u (key_id, plane, ref_id, audio_seconds, status, lease_expires_at, created_at, updated_at)
     SELECT v.key_id, v.plane, v.ref_id, v.audio_seconds,
            CASE WHEN v.at + make_interval(secs => ?) > now() THEN 'live' ELSE 'lapsed' END,
            v.at + make_interval(secs => ?), v.at, now()
       FROM ${UNNEST}
     ON CONFLICT (plane, ref_id) DO UPDATE
       SET audio_seconds = GREATEST(u.audio_seconds, EXCLUDED.audio_seconds),
           lease_expires_at = GREATEST(u.lease_expires_at, EXCLUDED.lease_expires_at),
           status = CASE WHEN GREATEST(u.lease_expires_at, EXCLUDED.lease_expires_at) > now()
                         THEN 'live' ELSE 'lapsed' END,
           updated_at = now()
       WHERE u.status <> 'final'`,
    [leaseTtlMs / 1000, leaseTtlMs / 1000, ...columns(entries, replayed)],
  );
}

/**
 * Writes a batch of entries (compacted first); resolves with the units it closed. `replayed`
 * entries (from the spool) are dated by their own `at`, fresh ones by Postgres's clock.
 */
export async function writeEntries(
  db: Knex,
  entries: Iterable<LedgerEntry>,
  leaseTtlMs: number,
  replayed = false,
): Promise<Closed[]> {
  const all = [...compact(entries).values()];
  const finals = all.filter((e) => e.kind === 'final');
  const lives = all.filter((e) => e.kind === 'live');
  const closed = finals.length > 0 ? await writeFinal(db, finals, replayed) : [];
  if (lives.length > 0) await writeLive(db, lives, leaseTtlMs, replayed);
  return closed;
}

/** Live rows whose lease ran out become lapsed: the process holding them died. */
export async function lapseExpired(db: Knex): Promise<Closed[]> {
  const r = await db.raw<{ rows: Closed[] }>(
    `UPDATE usage_events SET status = 'lapsed', updated_at = now()
      WHERE status = 'live' AND lease_expires_at < now()
      RETURNING plane, audio_seconds`,
  );
  return r.rows;
}

/** Audio seconds billed to a key within the last `windowSeconds`, live sessions' checkpoints included. */
export async function windowUsage(db: Knex, keyId: string, windowSeconds: number): Promise<number> {
  return (await billedInWindow(db, [keyId], windowSeconds)).get(keyId) ?? 0;
}

/**
 * True for errors that replaying the same entry can never fix (bad data, a
 * key that does not exist): Postgres classes 22 (data exception) and 23
 * (integrity constraint). Everything else (connection refused, shutdown,
 * timeouts, a missing table during a migration) is retried.
 */
export function isPermanent(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^(22|23)[0-9A-Z]{3}$/.test(code);
}
