/**
 * Spool files of decodes (`decode-<pid>-<uuid>.pcm` in the temp directory).
 * A process killed mid-decode (kill -9, OOM) cannot remove its own, so each
 * process sweeps at start the ones no live decode can own: those of a pid
 * that is gone, and its own pid's from before it started (a restart that got
 * the same pid, as PID 1 in a container does). Files of the old naming
 * (`decode-<uuid>.pcm`, no pid) are swept once an hour old.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const SPOOL_RE = /^decode-(?:(\d+)-)?[0-9a-f-]{36}\.pcm$/;
const LEGACY_MAX_AGE_MS = 3600_000;

/** A new spool file's path in `dir`, named for this process. */
export function spoolFile(dir: string): string {
  return path.join(dir, `decode-${process.pid}-${randomUUID()}.pcm`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes the spool files in `dir` that no live decode owns; resolves with the bytes freed. */
export async function sweepSpool(dir: string): Promise<{ files: number; bytes: number }> {
  const started = Date.now() - process.uptime() * 1000;
  let names: string[];
  try {
    names = await fs.promises.readdir(dir);
  } catch {
    return { files: 0, bytes: 0 };
  }
  let files = 0;
  let bytes = 0;
  for (const name of names) {
    const m = SPOOL_RE.exec(name);
    if (!m) continue;
    const file = path.join(dir, name);
    try {
      const st = await fs.promises.stat(file);
      const pid = m[1] === undefined ? undefined : Number(m[1]);
      const stale =
        pid === undefined
          ? Date.now() - st.mtimeMs > LEGACY_MAX_AGE_MS
          : pid === process.pid
            ? st.mtimeMs < started
            : !alive(pid);
      if (!stale) continue;
      await fs.promises.rm(file, { force: true });
      files++;
      bytes += st.size;
    } catch {
      // gone meanwhile
    }
  }
  return { files, bytes };
}
