/**
 * Chunk checkpoints: every transcribed chunk is stored as `chunk_{i}.json`
 * as soon as it exists and is never transcribed again while its checkpoint
 * matches the audio (sha256 of the decoded samples) and the slice bounds.
 */
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
