/**
 * A run waits briefly for the disk floor (DISK_FLOOR_MB) before it writes
 * the download: below it, the run pauses with InsufficientStorageError (an
 * outage of our own: the workflow is queued again and resumes from its
 * checkpoints), instead of downloading into a full disk. The wait bounds how
 * often a paused workflow comes back while the disk stays full, and lets it
 * go on at once when space returns.
 */
import type { BatchConfig } from '../../../shared/config/batch.js';
import { statfs } from 'node:fs/promises';
import { DiskFloor, InsufficientStorageError } from '../../../shared/disk.js';

const floors = new Map<string, DiskFloor>();
const WAIT_MS = 5000;
const POLL_MS = 250;

function floorOf(config: BatchConfig): DiskFloor {
  const dirs = [config.tmpDir, ...(config.storage.driver === 'fs' ? [config.storage.dir] : [])];
  const id = `${config.diskFloorBytes}:${dirs.join('\0')}`;
  let floor = floors.get(id);
  if (!floor) floors.set(id, (floor = new DiskFloor(dirs, config.diskFloorBytes)));
  return floor;
}

/** Free bytes in `dir` beyond the disk floor (undefined when they cannot be known). */
export async function roomIn(dir: string, floorBytes: number): Promise<number | undefined> {
  try {
    const s = await statfs(dir);
    return Math.max(0, s.bavail * s.bsize - floorBytes);
  } catch {
    return undefined;
  }
}

export async function waitForDiskRoom(config: BatchConfig, signal: AbortSignal): Promise<void> {
  const floor = floorOf(config);
  const deadline = Date.now() + WAIT_MS;
  while (await floor.below()) {
    if (signal.aborted) throw signal.reason;
    if (Date.now() >= deadline)
      throw new InsufficientStorageError(
        'The server is low on disk space; the job resumes when there is room.',
      );
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
