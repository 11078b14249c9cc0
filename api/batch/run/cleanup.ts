/** What a run removes: work folders of dead runs, artifacts an earlier run left that this one did not produce. */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ArtifactStore } from '../storage/index.js';
import type { ArtifactKeys } from '../artifacts.js';

/**
 * Audio is kept only while a run needs it: work folders of earlier runs of
 * this workflow belong to runs that died (this run holds the lease), so they
 * go before the new run fetches its own copy.
 */
export async function removeDeadWorkDirs(
  tmpDir: string,
  workflowId: string,
  own: string,
  log: Logger,
): Promise<void> {
  const names = await fsp.readdir(tmpDir).catch(() => [] as string[]);
  for (const name of names) {
    const dir = path.join(tmpDir, name);
    if (!name.startsWith(`${workflowId}-`) || dir === own) continue;
    await fsp.rm(dir, { recursive: true, force: true });
    log.info({ dir: name }, 'removed the work folder of a dead run');
  }
}

/**
 * A resubmission of the same request_id may slice differently or drop
 * review: artifacts an earlier run left that this run did not produce
 * (chunk_7 of a finer slicing, review files) would mix two runs under one
 * prefix. They are removed so the prefix holds exactly this run's table (2.5).
 */
export async function removeStaleArtifacts(
  store: ArtifactStore,
  keys: ArtifactKeys,
  keep: Set<string>,
  log: Logger,
): Promise<void> {
  for (const key of await store.list(keys.prefix)) {
    if (keep.has(key) || !keys.isOwn(key)) continue;
    await store.delete(key).catch((err) => log.warn({ err, key }, 'stale artifact not removed'));
  }
}
