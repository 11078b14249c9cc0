/**
 * Chunk checkpoints: every transcribed chunk is stored as `chunk_{i}.json`
 * as soon as it exists and is never transcribed again while its checkpoint
 * matches the audio (sha256 of the decoded samples) and the slice bounds.
 */
import type { Knex } from 'knex';
import type { ArtifactStore } from '../storage/index.js';
import type { ArtifactKeys } from '../artifacts.js';
import type { Slice } from '../../../shared/audio/slicing.js';
import type { ChunkCheckpoint } from '../types.js';

/** The stored checkpoints that still hold for these slices of this audio, by chunk index. */
export async function loadCheckpoints(
  store: ArtifactStore,
  keys: ArtifactKeys,
  audioSha: string,
  slices: Slice[],
): Promise<Map<number, ChunkCheckpoint>> {
  const found = new Map<number, ChunkCheckpoint>();
  const existing = new Set(await store.list(keys.prefix));
  await Promise.all(
    slices.map(async (s) => {
      const key = keys.chunk(s.index);
      if (!existing.has(key)) return;
      const cp = await store.getJson<ChunkCheckpoint>(key);
      if (
        cp &&
        cp.audio_sha256 === audioSha &&
        Math.abs(cp.start - s.start) < 1e-6 &&
        Math.abs(cp.end - s.end) < 1e-6
      ) {
        found.set(s.index, cp);
      }
    }),
  );
  return found;
}

/**
 * Chunks this run reuses from an earlier workflow of the same request_id are
 * billed by that workflow only if it was billed (it completed). A chunk left
 * by one that errored or was terminated was never billed: it is adopted
 * here (its checkpoint rewritten to this workflow before the bill, so it is
 * billed once, by this workflow, whatever happens after). Returns the
 * checkpoints with adopted ones updated.
 */
export async function adoptUnbilledChunks(
  db: Knex,
  store: ArtifactStore,
  keys: ArtifactKeys,
  workflowId: string,
  ordered: ChunkCheckpoint[],
): Promise<ChunkCheckpoint[]> {
  const others = [
    ...new Set(ordered.map((c) => c.workflow_id).filter((w): w is string => !!w && w !== workflowId)),
  ];
  if (others.length === 0) return ordered;
  // Adopted: chunks of a workflow that ended without a bill (errored, terminated). A completed one was
  // billed (its bill may still be in the ledger's spool, so its status decides, not the table alone).
  const unbilled = new Set(
    (
      await db('batch_workflows')
        .whereIn('id', others)
        .whereIn('status', ['errored', 'terminated'])
        .whereNotExists(
          db('usage_events').where({ plane: 'batch' }).whereRaw('usage_events.ref_id = batch_workflows.id'),
        )
        .select<{ id: string }[]>('id')
    ).map((r) => r.id),
  );
  return Promise.all(
    ordered.map(async (c) => {
      if (!c.workflow_id || !unbilled.has(c.workflow_id)) return c;
      const adopted = { ...c, workflow_id: workflowId };
      await store.putJson(keys.chunk(c.index), adopted);
      return adopted;
    }),
  );
}
