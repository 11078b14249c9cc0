/**
 * The usage ledger: the one code path by which segment requests, realtime
 * sessions and batch jobs are billed (docs/decisions.md, "Usage ledger").
 *
 * - `record(unit)`: the unit's final audio seconds, written once.
 * - `checkpoint(units)`: running units (live realtime sessions); the row only
 *   grows and holds a lease; a process that dies leaves its last checkpoint,
 *   and any live process lapses the row when the lease runs out (`sweep`).
 * - When Postgres does not answer (error or USAGE_WRITE_TIMEOUT_MS), entries
 *   go to the durable spool (spool.ts) and are replayed with backoff until
 *   written, however long that takes. Every write is idempotent on
 *   (plane, ref_id), so replays never bill twice.
 *
 * Neither method throws: each resolves once the entry is in Postgres or on
 * disk in the spool.
 */
import fsp from 'node:fs/promises';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { UsageLedgerConfig } from '../config/usage.js';
import { counter, gauge } from '../metrics/index.js';
import { Spool } from './spool.js';
import {
  compact,
  entryKey,
  isPermanent,
  lapseExpired,
  writeEntries,
  type Closed,
  type LedgerEntry,
  type UsageUnit,
} from './store.js';

const billed = counter(
  'stt_billed_audio_seconds_total',
  'Audio seconds billed, by plane, counted when a unit closes (final, or lapsed when its process died).',
  ['plane'],
);
const spooledUnits = gauge(
  'stt_usage_spooled_units',
  'Usage units held in the local spool, not yet in Postgres.',
);
const spoolWrites = counter('stt_usage_spool_writes_total', 'Usage entries that went to the spool.');

class WriteTimeout extends Error {
  override name = 'WriteTimeout';
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  p.catch(() => {}); // a write that times out may still fail later: nobody waits for it any more
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WriteTimeout(`usage write took longer than ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export class UsageLedger {
  readonly spool: Spool;
  /** Entries in the spool not yet written, compacted by unit. */
  private readonly pending = new Map<string, LedgerEntry>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Spool file operations run one at a time, in order. */
  private fileOps: Promise<unknown> = Promise.resolve();
  private replaying: Promise<boolean> | undefined;
  private replayTimer: NodeJS.Timeout | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  private backoffMs: number;
  private closed = false;
  private readonly log: Logger;

  constructor(
    private readonly db: Knex,
    private readonly cfg: UsageLedgerConfig,
    logger: Logger,
  ) {
    this.spool = new Spool(cfg.spoolDir, cfg.spoolOrphanMs);
    this.backoffMs = cfg.retryMinMs;
    this.log = logger.child({ component: 'usage-ledger' });
  }

  /** Adopts spools left by dead processes and starts the periodic sweep (lapse expired leases, adopt orphans). */
  start(): this {
    if (this.sweepTimer || this.closed) return this;
    this.sweepTimer = setInterval(() => void this.sweep(), this.cfg.sweepMs);
    this.sweepTimer.unref();
    void this.sweep();
    return this;
  }

  /** Units held in the spool (not yet in Postgres). */
  get spooled(): number {
    return this.pending.size;
  }

  /** False while the spool is full: new billable work is refused rather than served unbilled. */
  get accepting(): boolean {
    return this.pending.size < this.cfg.spoolMaxUnits;
  }

  /** Bills a finished unit (exactly its audio seconds, once). */
  record(unit: UsageUnit): Promise<void> {
    return this.track([{ ...unit, kind: 'final', at: Date.now() }]);
  }

  /** Checkpoints running units: their rows grow to these seconds and stay live for one lease TTL. */
  checkpoint(units: UsageUnit[]): Promise<void> {
    if (units.length === 0) return Promise.resolve();
    const at = Date.now();
    return this.track(units.map((u) => ({ ...u, kind: 'live' as const, at })));
  }

  /** Resolves when every write started so far is in Postgres or in the spool. */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** Replays the spool now; true when nothing is left in it. */
  async flush(): Promise<boolean> {
    await this.drain();
    await this.replaying;
    if (this.pending.size === 0) {
      await this.fileOps; // the spool file's last rewrite (its removal) is done too
      return true;
    }
    clearTimeout(this.replayTimer);
    this.replayTimer = undefined;
    return this.replay();
  }

  /** Lapses live rows whose lease ran out and adopts orphaned spool files. */
  async sweep(): Promise<void> {
    try {
      this.count(await withTimeout(lapseExpired(this.db), this.cfg.writeTimeoutMs), 'lapsed');
    } catch (err) {
      this.log.debug({ err }, 'usage sweep could not reach Postgres');
    }
    await this.adoptOrphans().catch((err: unknown) => this.log.warn({ err }, 'could not adopt spool files'));
  }

  /** Stops timers after a last replay attempt; what is still spooled stays on disk for the next process. */
  async close(): Promise<void> {
    await this.flush().catch(() => false);
    this.closed = true;
    clearInterval(this.sweepTimer);
    clearTimeout(this.replayTimer);
    await this.replaying;
    await this.fileOps.catch(() => {});
    if (this.pending.size > 0) {
      this.log.warn(
        { units: this.pending.size, spool: this.spool.file },
        'usage left in the spool; it is replayed by the next process that starts on this spool directory',
      );
    }
  }

  // ---- internals -----------------------------------------------------------------------------

  private track(entries: LedgerEntry[]): Promise<void> {
    const p = this.write(entries).catch((err: unknown) => {
      // Not expected (write handles Postgres and disk failures); the entries stay pending in memory.
      this.log.error({ err }, 'usage write failed unexpectedly');
    });
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
    return p;
  }

  private async write(entries: LedgerEntry[]): Promise<void> {
    // While the spool holds entries, Postgres was unreachable: queue behind them instead of waiting out a timeout.
    if (this.pending.size === 0 && !this.closed) {
      try {
        this.count(
          await withTimeout(writeEntries(this.db, entries, this.cfg.leaseTtlMs), this.cfg.writeTimeoutMs),
        );
        return;
      } catch (err) {
        if (isPermanent(err)) return this.writeEach(entries, false);
        this.log.warn({ err: errSummary(err) }, 'usage write failed; spooling it');
      }
    }
    await this.toSpool(entries);
  }

  /** Adds entries to the spool; false when the disk refused them (they are still replayed from memory). */
  private async toSpool(entries: LedgerEntry[]): Promise<boolean> {
    for (const e of entries) {
      const k = entryKey(e);
      const prev = this.pending.get(k);
      this.pending.set(k, prev ? compact([prev, e]).get(k)! : e);
    }
    spooledUnits.set(this.pending.size);
    spoolWrites.inc(entries.length);
    this.scheduleReplay(this.backoffMs);
    try {
      await this.fileOp(() => this.spool.append(entries));
      return true;
    } catch (err) {
      this.log.error({ err, units: entries.length }, 'usage spool not writable; usage kept in memory only');
      return false;
    }
  }

  /** A batch hit a permanent error: write entries one by one and set aside the ones that can never be written. */
  private async writeEach(entries: LedgerEntry[], replayed: boolean): Promise<void> {
    const rejected: LedgerEntry[] = [];
    for (const [i, e] of entries.entries()) {
      try {
        this.count(
          await withTimeout(
            writeEntries(this.db, [e], this.cfg.leaseTtlMs, replayed),
            this.cfg.writeTimeoutMs,
          ),
        );
        this.dropPending(e);
      } catch (err) {
        if (!isPermanent(err)) {
          // Entries of a replay are spooled already (the same objects are pending); fresh ones are not.
          await this.toSpool(entries.slice(i).filter((x) => this.pending.get(entryKey(x)) !== x));
          break;
        }
        this.log.error(
          { err: errSummary(err), plane: e.plane, refId: e.refId, keyId: e.keyId },
          'usage entry can never be written; kept in the spool directory as rejected.log',
        );
        rejected.push(e);
        this.dropPending(e);
      }
    }
    if (rejected.length > 0) {
      await this.fileOp(() => this.spool.reject(rejected)).catch((err: unknown) =>
        this.log.error({ err }, 'could not keep rejected usage entries'),
      );
    }
  }

  private dropPending(e: LedgerEntry): void {
    if (this.pending.get(entryKey(e)) === e) this.pending.delete(entryKey(e));
  }

  private scheduleReplay(delayMs: number): void {
    if (this.replayTimer || this.closed) return;
    this.replayTimer = setTimeout(() => {
      this.replayTimer = undefined;
      void this.replay();
    }, delayMs);
    this.replayTimer.unref();
  }

  private replay(): Promise<boolean> {
    this.replaying ??= this.replayOnce().finally(() => (this.replaying = undefined));
    return this.replaying;
  }

  private async replayOnce(): Promise<boolean> {
    const snapshot = [...this.pending.values()];
    if (snapshot.length === 0) return true;
    let ok = true;
    try {
      this.count(
        await withTimeout(
          writeEntries(this.db, snapshot, this.cfg.leaseTtlMs, true),
          this.cfg.writeTimeoutMs,
        ),
      );
      for (const e of snapshot) this.dropPending(e);
      this.log.info({ units: snapshot.length }, 'spooled usage written to Postgres');
    } catch (err) {
      if (isPermanent(err)) {
        await this.writeEach(snapshot, true);
      } else {
        ok = false;
        this.log.warn(
          { err: errSummary(err), units: snapshot.length, retryInMs: this.backoffMs },
          'spooled usage not written yet; retrying',
        );
      }
    }
    spooledUnits.set(this.pending.size);
    // The file is rewritten compacted after every attempt (an outage grows it by one line per checkpoint).
    const left = [...this.pending.values()];
    await this.fileOp(() => this.spool.rewrite(left)).catch((err: unknown) =>
      this.log.error({ err }, 'could not rewrite the usage spool'),
    );
    this.backoffMs = ok ? this.cfg.retryMinMs : Math.min(this.backoffMs * 2, this.cfg.retryMaxMs);
    if (this.pending.size > 0) this.scheduleReplay(ok ? 0 : this.backoffMs);
    return this.pending.size === 0;
  }

  private async adoptOrphans(): Promise<void> {
    for (const file of await this.spool.orphans()) {
      let read;
      try {
        read = await Spool.read(file);
      } catch {
        continue; // adopted by another process meanwhile
      }
      if (read.skipped > 0)
        this.log.warn({ skipped: read.skipped }, 'unreadable lines in an orphaned usage spool');
      // Ours on disk first, then theirs removed: a crash in between replays them twice, which bills once.
      if (!(await this.toSpool(read.entries))) continue; // theirs stays on disk until ours can hold it
      await fsp.rm(file, { force: true });
      this.log.info({ units: read.entries.length }, 'adopted the usage spool of a process that is gone');
    }
  }

  private fileOp<T>(op: () => Promise<T>): Promise<T> {
    const p = this.fileOps.then(op, op);
    this.fileOps = p.catch(() => {});
    return p;
  }

  private count(closed: Closed[], how: 'final' | 'lapsed' = 'final'): void {
    for (const c of closed) billed.inc({ plane: c.plane }, Number(c.audio_seconds));
    if (how === 'lapsed' && closed.length > 0) {
      this.log.info(
        { units: closed.length },
        'usage of sessions whose process died closed at their last checkpoint',
      );
    }
  }
}

/** What a failed write says in a log line: no SQL parameters (they hold key ids), no connection strings. */
function errSummary(err: unknown): { name?: string; code?: string; message?: string } {
  const e = err as { name?: string; code?: string; message?: string };
  return { name: e?.name, code: e?.code, message: e?.message?.slice(0, 200) };
}
