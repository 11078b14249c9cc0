/**
 * The plan's rolling audio budget (maxAudioSecondsPerWindow), one module and
 * one instance per process for every plane (issue 22; built once by the
 * platform, shared/platform.ts, and passed in): work reserves its audio
 * seconds at admission, atomically against what the key has billed in the
 * window plus what other work in flight holds, and the reservation lasts
 * until the work's usage is billed (or it is released on failure, or it
 * expires when its process died).
 *
 * Every plane goes through a `Reservation` (`budget.reservation(unit)`),
 * which states the sequence once: `reserve`/`reserveUpTo` at admission,
 * `bill(seconds)` (the ledger's record, then the reservation ends) or
 * `release()` (no bill: the work failed, or never started). Both ends are
 * idempotent and never throw.
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
import type { UsageLedger } from './ledger.js';
import type { Plane } from './store.js';

/** One billable unit of work: a segment request, a realtime session, a batch workflow. */
export interface BudgetUnit {
  plane: Plane;
  /** The bill's reference (request, session or workflow id); unique per plane. */
  refId: string;
  keyId: string;
}

/** What a unit asks of its key's window. */
export interface BudgetAsk {
  seconds: number;
  /** The key's window (maxAudioSecondsPerWindow). */
  limit: number;
  /** How long the reservation holds if nothing settles it (its process died). */
  ttlSeconds: number;
}

type Request = BudgetUnit & Omit<BudgetAsk, 'limit'>;

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

/** USED with the reservations of a batch (`refs` of `plane`) left out: a re-reservation replaces its own. */
const USED_EXCEPT_MANY = USED.replace(
  'NOT (r.plane = :plane AND r.ref_id = :ref)',
  'NOT (r.plane = :plane AND r.ref_id = ANY(:refs::text[]))',
);

/** Most reservations one transaction answers (`reserveUpTo`). */
const RESERVE_BATCH = 500;

interface Waiting {
  r: Request;
  limit: number;
  resolve: (d: BudgetDecision) => void;
  reject: (err: unknown) => void;
}

export class UsageBudget {
  constructor(
    private readonly db: Knex,
    private readonly windowSeconds: number,
    /** Where `Reservation.bill` writes (the process's usage ledger). */
    readonly ledger: UsageLedger,
  ) {}

  /**
   * The unit's reservation: made by its `reserve`, or one made earlier
   * (another run or process of a batch workflow) to bill or release.
   */
  reservation(unit: BudgetUnit): Reservation {
    return new Reservation(this, unit);
  }

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
   * Seconds until `excess` seconds of the key's billed audio have aged out of the window (whole
   * seconds, at least 1); undefined when its bills in the window hold less (work in flight holds it).
   */
  async secondsUntilFreed(keyId: string, excess: number): Promise<number | undefined> {
    const r = await this.db.raw<{ rows: { wait: string }[] }>(
      `SELECT extract(epoch FROM (created_at + make_interval(secs => :window) - now())) AS wait
         FROM (SELECT created_at, sum(audio_seconds) OVER (ORDER BY created_at, ref_id) AS freed
                 FROM usage_events WHERE key_id = :key AND ${IN_WINDOW.replace('?', ':window')}) e
        WHERE freed >= :excess ORDER BY created_at LIMIT 1`,
      { key: keyId, window: this.windowSeconds, excess },
    );
    const wait = r.rows[0] ? Number(r.rows[0].wait) : NaN;
    return Number.isFinite(wait) ? Math.max(1, Math.ceil(wait)) : undefined;
  }

  /** For `Reservation.reserveUpTo` (the planes reserve through a Reservation): queued per key and plane. */
  reserveUpTo(r: Request, limit: number): Promise<BudgetDecision> {
    return new Promise((resolve, reject) => {
      const queueKey = `${r.keyId}\0${r.plane}`;
      let q = this.queues.get(queueKey);
      if (!q) this.queues.set(queueKey, (q = []));
      q.push({ r, limit, resolve, reject });
      if (q.length === 1) void this.drain(queueKey, q);
    });
  }

  private readonly queues = new Map<string, Waiting[]>();

  /** Answers one key's waiting reservations, a batch at a time, until none wait. */
  private async drain(queueKey: string, q: Waiting[]): Promise<void> {
    while (q.length > 0) {
      const batch = q.slice(0, RESERVE_BATCH);
      try {
        const decisions = await this.reserveBatch(batch);
        batch.forEach((w, i) => w.resolve(decisions[i]));
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
      q.splice(0, batch.length);
    }
    this.queues.delete(queueKey);
  }

  /** `reserveUpTo` for several reservations of one key and plane, in order, in one transaction. */
  private reserveBatch(batch: Waiting[]): Promise<BudgetDecision[]> {
    const { keyId, plane } = batch[0].r;
    return this.db.transaction(async (tx) => {
      await tx.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`usage_budget:${keyId}`]);
      const row = await tx.raw<{ rows: { used: string }[] }>(USED_EXCEPT_MANY, {
        key: keyId,
        window: this.windowSeconds,
        plane,
        refs: batch.map((w) => w.r.refId),
      });
      let used = Number(row.rows[0].used);
      const decisions: BudgetDecision[] = [];
      const rows: { plane: Plane; ref_id: string; key_id: string; audio_seconds: number; ttl: number }[] = [];
      for (const { r, limit } of batch) {
        const seconds = Math.min(r.seconds, limit - used);
        if (seconds <= 0) {
          decisions.push({ ok: false, used });
          continue;
        }
        decisions.push({ ok: true, used, seconds });
        rows.push({ plane, ref_id: r.refId, key_id: keyId, audio_seconds: seconds, ttl: r.ttlSeconds });
        used += seconds;
      }
      if (rows.length > 0) {
        await tx.raw(
          `INSERT INTO usage_reservations (plane, ref_id, key_id, audio_seconds, expires_at)
           SELECT plane, ref_id, key_id, audio_seconds, now() + make_interval(secs => ttl)
             FROM jsonb_to_recordset(?::jsonb)
               AS x(plane text, ref_id text, key_id text, audio_seconds double precision, ttl double precision)
           ON CONFLICT (plane, ref_id) DO UPDATE
             SET audio_seconds = EXCLUDED.audio_seconds, expires_at = EXCLUDED.expires_at`,
          [JSON.stringify(rows)],
        );
      }
      await tx('usage_reservations').where('key_id', keyId).andWhere('expires_at', '<', tx.fn.now()).delete();
      return decisions;
    });
  }

  /** For `Reservation.reserve`: one transaction serialised per key. */
  async reserveExact(r: Request, limit: number): Promise<BudgetDecision> {
    return this.db.transaction(async (tx) => {
      await tx.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`usage_budget:${r.keyId}`]);
      const row = await tx.raw<{ rows: { used: string }[] }>(USED, {
        key: r.keyId,
        window: this.windowSeconds,
        plane: r.plane,
        ref: r.refId,
      });
      const used = Number(row.rows[0].used);
      const seconds = r.seconds;
      // An exact reservation of nothing (an empty clip) always fits: it is billed at 0 s (interface 1, item 2).
      if (seconds === 0) return { ok: true, used, seconds: 0 };
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
  async end(unit: BudgetUnit): Promise<void> {
    await this.db('usage_reservations')
      .where({ plane: unit.plane, ref_id: unit.refId })
      .delete()
      .catch(() => {});
  }
}

/**
 * One unit's hold on its key's window, from admission to its bill. Every
 * plane states the sequence through it: `reserve` (or `reserveUpTo`), then
 * `bill(seconds)` once the work is done, or `release()` when it failed or
 * never ran. `bill` and `release` each act once (later calls return the
 * first call's promise) and never throw; the reservation they would end
 * expires by itself at its TTL.
 */
export class Reservation {
  private billing: Promise<void> | undefined;
  private releasing: Promise<void> | undefined;

  constructor(
    private readonly budget: UsageBudget,
    readonly unit: BudgetUnit,
  ) {}

  /**
   * Reserves `ask.seconds` if the key's window holds them (`ask.limit`), in
   * one transaction serialised per key; the same unit reserving again
   * replaces its reservation (a resumed job's probe).
   */
  reserve(ask: BudgetAsk): Promise<BudgetDecision> {
    return this.budget.reserveExact({ ...this.unit, ...ask }, ask.limit);
  }

  /**
   * As `reserve`, but takes what the window has left when that is less (at
   * least something). Concurrent calls for one key are answered together, in
   * order, by one transaction (at most RESERVE_BATCH): a fan-in of many
   * sessions of one key then costs one read of the key's window per batch,
   * not one per session under the key's lock.
   */
  reserveUpTo(ask: BudgetAsk): Promise<BudgetDecision> {
    return this.budget.reserveUpTo({ ...this.unit, ...ask }, ask.limit);
  }

  /**
   * Bills the unit's `audioSeconds` through the usage ledger (resolves once
   * the bill is in Postgres or the spool), then ends the reservation: the
   * bill now counts in the window in its place. `release()` resolves when
   * that end is done.
   */
  bill(audioSeconds: number): Promise<void> {
    this.billing ??= this.budget.ledger.record({ ...this.unit, audioSeconds }).then(() => {
      void this.release();
    });
    return this.billing;
  }

  /** Ends the reservation without a bill (after one, if `bill` was called); resolves when it has ended. */
  release(): Promise<void> {
    // Never before a bill in progress is written: the window would count neither for a moment.
    this.releasing ??= (this.billing ?? Promise.resolve()).then(() => this.budget.end(this.unit));
    return this.releasing;
  }
}
