/**
 * Our own disk running out (issue 36): a write that fails with ENOSPC or
 * EDQUOT is the service's condition, not the client's input, so it is
 * answered 507 `insufficient_storage` (uploads) or pauses the batch job,
 * and the process lives. The disk floor refuses new work before anything is
 * written while a directory's free space is below `floorBytes`.
 */
import { statfs } from 'node:fs/promises';

const DISK_FULL_CODES = new Set(['ENOSPC', 'EDQUOT']);
/** ffmpeg and other children report it in words. */
const DISK_FULL_TEXT = /No space left on device|Disk quota exceeded/i;

/** Seconds a client refused for lack of disk is told to wait. */
export const DISK_RETRY_AFTER_SECONDS = 5;

export class InsufficientStorageError extends Error {
  override name = 'InsufficientStorageError';
  readonly code = 'insufficient_storage';
  constructor(message = 'The server has no disk space left for this work; try again shortly.') {
    super(message);
  }
}

/** True when `err` (or its cause) is our disk being full. */
export function isDiskFull(err: unknown, depth = 0): boolean {
  const e = err as { code?: unknown; message?: unknown; cause?: unknown } | null;
  if (!e || typeof e !== 'object' || depth > 4) return false;
  if (e instanceof InsufficientStorageError) return true;
  if (typeof e.code === 'string' && DISK_FULL_CODES.has(e.code)) return true;
  if (typeof e.message === 'string' && DISK_FULL_TEXT.test(e.message)) return true;
  return isDiskFull(e.cause, depth + 1);
}

/** True when text a child process printed says the disk is full. */
export function saysDiskFull(text: string): boolean {
  return DISK_FULL_TEXT.test(text);
}

/**
 * Free space of the directories new work writes to, against a floor.
 * Answers from a one-second cache, so a flood of requests costs one statfs
 * per directory a second; a directory that cannot be asked counts as free.
 */
export class DiskFloor {
  private cached: { at: number; below: string | undefined } | undefined;
  private pending: Promise<string | undefined> | undefined;

  constructor(
    private readonly dirs: string[],
    readonly floorBytes: number,
  ) {}

  /** The first directory whose free space is below the floor, or undefined (also when the floor is 0). */
  async below(): Promise<string | undefined> {
    if (this.floorBytes <= 0 || this.dirs.length === 0) return undefined;
    if (this.cached && Date.now() - this.cached.at < 1000) return this.cached.below;
    this.pending ??= this.measure().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async measure(): Promise<string | undefined> {
    let below: string | undefined;
    for (const dir of this.dirs) {
      try {
        const s = await statfs(dir);
        if (s.bavail * s.bsize < this.floorBytes) {
          below = dir;
          break;
        }
      } catch {
        // missing or unreadable: the write itself will say
      }
    }
    this.cached = { at: Date.now(), below };
    return below;
  }
}
