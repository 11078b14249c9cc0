/**
 * The plan's rolling audio budget (maxAudioSecondsPerWindow), one module for
 * every plane (issue 22): work reserves its audio seconds at admission,
 * atomically against what the key has billed in the window plus what other
 * work in flight holds, and the reservation lasts until the work's usage is
 * billed (or it is released on failure, or it expires when its process died).
 *
 * - segment: the decoded duration, before the engine runs;
 * - batch: the probed duration, before any chunk is transcribed;
 * - realtime: what the session may use (the window's rest, at most the
 *   plan's per-session audio), at the upgrade.
 *
 * A reservation is keyed like its bill (plane, ref_id): once the usage row
 * exists (a realtime session's checkpoints, the final record), only what is
 * left of the reservation beyond it counts, so a bill and its reservation are
 * never counted twice and there is no gap between releasing one and writing
 * the other. Concurrent requests therefore cannot overspend the window at
 * all: each check sees every other one's seconds.
 *
 * Failure policy: a budget that cannot be read (Postgres unreachable) refuses
 * the segment request (503, Retry-After) and retries the batch step; the
 * realtime tier admits with the plan's per-session limits (its sessions are
 * metered and end at their own limits) — see docs/decisions.md.
 */
import type { Knex } from 'knex';
import type { Plane } from './store.js';

export interface Reservation {
  plane: Plane;
  refId: string;
  keyId: string;
  seconds: number;
  /** How long the reservation holds if nothing settles it (its process died). */
  ttlSeconds: number;
}

export type BudgetDecision = { ok: true; used: number; seconds: number } | { ok: false; used: number };

/**
 * The one window predicate (on usage_events' `created_at`): the rolling
 * billing window of maxAudioSecondsPerWindow, read by the budget, the usage
 * report and the realtime admission alike.
 */
const IN_WINDOW = 'created_at > now() - make_interval(secs => ?)';

/** Seconds billed per key within the last `windowSeconds` (live sessions' checkpoints included). */
export async function billedInWindow(
  db: Knex,
  keyIds: string[],
  windowSeconds: number,
): Promise<Map<string, number>> {
  const r = await db.raw<{ rows: { key_id: string; seconds: string | number | null }[] }>(
    `SELECT key_id, sum(audio_seconds) AS seconds FROM usage_events
      WHERE key_id = ANY(?::text[]) AND ${IN_WINDOW} GROUP BY key_id`,
    [keyIds, windowSeconds],
  );
  const rows = r.rows;
  return new Map(rows.map((r) => [r.key_id, Number(r.seconds ?? 0)]));
}

/** Seconds the key has billed in the window plus what other work holds (`except`: the caller's own). */
const USED = `
SELECT
  (SELECT COALESCE(sum(audio_seconds), 0) FROM usage_events
     WHERE key_id = :key AND ${IN_WINDOW.replace('?', ':window')})
+ (SELECT COALESCE(sum(GREATEST(0, r.audio_seconds - COALESCE(u.audio_seconds, 0))), 0)
     FROM usage_reservations r
     LEFT JOIN usage_events u ON u.plane = r.plane AND u.ref_id = r.ref_id
     WHERE r.key_id = :key AND r.expires_at > now() AND NOT (r.plane = :plane AND r.ref_id = :ref)
       -- A unit whose process died (its live row lapsed, or its lease ran out) holds nothing more.
       AND COALESCE(u.status, '') <> 'lapsed'
       AND NOT COALESCE(u.status = 'live' AND u.lease_expires_at < now(), false)) AS used`;

export class UsageBudget {
  constructor(
    private readonly db: Knex,
    private readonly windowSeconds: number,
  ) {}

  /** Seconds the key has used in the window, counting the reservations of work in flight. */
  async used(keyId: string): Promise<number> {
    const r = await this.db.raw<{ rows: { used: string }[] }>(USED, {
      key: keyId,
      window: this.windowSeconds,
      plane: '',
      ref: '',
    });
    return Number(r.rows[0].used);
  }

  /**
   * Reserves `seconds` if the key's window holds them (`limit`), in one
   * transaction serialised per key; the same (plane, ref) reserving again
   * replaces its reservation (a resumed job's probe).
   */
  reserve(r: Reservation, limit: number): Promise<BudgetDecision> {
    return this.reserveWithin(r, limit, false);
  }

  /** As `reserve`, but takes what the window has left when that is less (at least something). */
  reserveUpTo(r: Reservation, limit: number): Promise<BudgetDecision> {
    return this.reserveWithin(r, limit, true);
  }

  private async reserveWithin(r: Reservation, limit: number, partial: boolean): Promise<BudgetDecision> {
    return this.db.transaction(async (tx) => {
      await tx.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`usage_budget:${r.keyId}`]);
      const row = await tx.raw<{ rows: { used: string }[] }>(USED, {
        key: r.keyId,
        window: this.windowSeconds,
        plane: r.plane,
        ref: r.refId,
      });
      const used = Number(row.rows[0].used);
      const seconds = partial ? Math.min(r.seconds, limit - used) : r.seconds;
      // An exact reservation of nothing (an empty clip) always fits: it is billed at 0 s (interface 1, item 2).
      if (!partial && seconds === 0) return { ok: true, used, seconds: 0 };
      if (seconds <= 0 || used + seconds > limit) return { ok: false, used };
      await tx.raw(
        `INSERT INTO usage_reservations (plane, ref_id, key_id, audio_seconds, expires_at)
         VALUES (?, ?, ?, ?, now() + make_interval(secs => ?))
         ON CONFLICT (plane, ref_id) DO UPDATE
           SET audio_seconds = EXCLUDED.audio_seconds, expires_at = EXCLUDED.expires_at`,
        [r.plane, r.refId, r.keyId, seconds, r.ttlSeconds],
      );
      // Expired reservations of this key are dead weight: drop them while the key is locked.
      await tx('usage_reservations')
        .where('key_id', r.keyId)
        .andWhere('expires_at', '<', tx.fn.now())
        .delete();
      return { ok: true, used, seconds };
    });
  }

  /** Ends a reservation (its work was billed, or failed); never throws (it expires by itself). */
  async release(plane: Plane, refId: string): Promise<void> {
    await this.db('usage_reservations')
      .where({ plane, ref_id: refId })
      .delete()
      .catch(() => {});
  }
}
