/**
 * The ledger's spool: usage that could not reach Postgres, kept durably on
 * local disk until it is written. One append-only JSON-lines file per
 * process (`{host}.{pid}.{process start}.{random}.jsonl` under
 * USAGE_SPOOL_DIR); each line
 * is one ledger entry, appended and fdatasync'ed before the caller is told
 * the unit is safe. The owner rewrites its file compacted (tmp + rename)
 * after each replay attempt, which also shows it is alive; it deletes the
 * file once everything is written.
 *
 * A file whose process is gone (same host and a pid that no longer runs or
 * now belongs to a later process, as after a container restart where the
 * service is pid 1 again; or no write for USAGE_SPOOL_ORPHAN_MS on any host
 * sharing the directory) is an orphan: any process adopts its entries and replays them. Entries are
 * idempotent, so a file replayed twice (a crash between adopting and
 * deleting) bills once.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { LedgerEntry } from './store.js';

const SUFFIX = '.jsonl';
/** When this process started (ms): tells this process from an earlier one that had the same pid. */
const PROCESS_START = String(Math.round(performance.timeOrigin));
const PLANES = new Set(['segment', 'realtime', 'batch']);

function isEntry(v: unknown): v is LedgerEntry {
  const e = v as Partial<LedgerEntry> | null;
  return (
    !!e &&
    (e.kind === 'live' || e.kind === 'final') &&
    typeof e.keyId === 'string' &&
    typeof e.refId === 'string' &&
    typeof e.plane === 'string' &&
    PLANES.has(e.plane) &&
    typeof e.audioSeconds === 'number' &&
    Number.isFinite(e.audioSeconds) &&
    typeof e.at === 'number' &&
    Number.isFinite(e.at)
  );
}

const line = (e: LedgerEntry): string =>
  JSON.stringify({
    kind: e.kind,
    keyId: e.keyId,
    plane: e.plane,
    refId: e.refId,
    audioSeconds: e.audioSeconds,
    at: e.at,
  }) + '\n';

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class Spool {
  readonly file: string;
  private readonly host = os.hostname().replace(/[^A-Za-z0-9_-]/g, '_');

  constructor(
    readonly dir: string,
    private readonly orphanMs: number,
  ) {
    const name = `${this.host}.${process.pid}.${PROCESS_START}.${randomBytes(4).toString('hex')}${SUFFIX}`;
    this.file = path.join(dir, name);
  }

  /** Appends entries and waits until they are on disk. */
  async append(entries: LedgerEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await fsp.mkdir(this.dir, { recursive: true });
    const fh = await fsp.open(this.file, 'a', 0o600);
    try {
      await fh.appendFile(entries.map(line).join(''));
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  /** Replaces the file by exactly these entries (atomically), or removes it when there are none. */
  async rewrite(entries: LedgerEntry[]): Promise<void> {
    if (entries.length === 0) {
      await fsp.rm(this.file, { force: true });
      return;
    }
    await fsp.mkdir(this.dir, { recursive: true });
    const tmp = `${this.file}.tmp`;
    const fh = await fsp.open(tmp, 'w', 0o600);
    try {
      await fh.writeFile(entries.map(line).join(''));
      await fh.datasync();
    } finally {
      await fh.close();
    }
    await fsp.rename(tmp, this.file);
  }

  /** Entries of a spool file; lines cut short by a crash (or otherwise unreadable) are skipped and counted. */
  static async read(file: string): Promise<{ entries: LedgerEntry[]; skipped: number }> {
    const text = await fsp.readFile(file, 'utf8');
    const entries: LedgerEntry[] = [];
    let skipped = 0;
    for (const l of text.split('\n')) {
      if (l.trim() === '') continue;
      try {
        const v: unknown = JSON.parse(l);
        if (isEntry(v)) entries.push(v);
        else skipped++;
      } catch {
        skipped++;
      }
    }
    return { entries, skipped };
  }

  /** Spool files of processes that are gone (never this spool's own file). */
  async orphans(now = Date.now()): Promise<string[]> {
    let names: string[];
    try {
      names = await fsp.readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const out: string[] = [];
    for (const name of names) {
      const file = path.join(this.dir, name);
      let stale: boolean;
      try {
        stale = now - fs.statSync(file).mtimeMs > this.orphanMs;
      } catch {
        continue; // removed meanwhile
      }
      // A rewrite cut short by a crash leaves its temporary file; the spool file itself is intact.
      if (name.endsWith(`${SUFFIX}.tmp`) && stale) fs.rmSync(file, { force: true });
      if (!name.endsWith(SUFFIX) || file === this.file) continue;
      const [host, pid, started] = name.split('.');
      const samePid = pid === String(process.pid);
      const gone =
        host === this.host &&
        /^\d+$/.test(pid ?? '') &&
        (samePid ? started !== PROCESS_START : !pidAlive(Number(pid)));
      if (gone || stale) out.push(file);
    }
    return out;
  }

  /** Units that can never be written (see isPermanent) are kept here for an operator, not retried. */
  async reject(entries: LedgerEntry[]): Promise<void> {
    await fsp.mkdir(this.dir, { recursive: true });
    await fsp.appendFile(path.join(this.dir, 'rejected.log'), entries.map(line).join(''), { mode: 0o600 });
  }
}
