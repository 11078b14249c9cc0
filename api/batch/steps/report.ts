/**
 * Step `report`: what the run did (chunks transcribed and reused, engine
 * and wall time) and the artifacts it leaves; artifacts of an earlier run
 * under the same request_id that this run did not produce are removed.
 */
import { runArtifacts } from '../artifacts.js';
import { round3 } from '../../../shared/numbers.js';
import { removeStaleArtifacts } from '../run/cleanup.js';
import type { RunContext } from '../run/context.js';
import type { ChunkCheckpoint } from '../types.js';
import type { ProbeOutput } from './probe.js';
import type { TranscribeOutput } from './transcribe.js';

export async function report(
  ctx: RunContext,
  chunks: ChunkCheckpoint[],
  probed: ProbeOutput,
  transcribed: TranscribeOutput,
) {
  const { row, params: p, keys } = ctx;
  const { summaries } = transcribed;
  const reused = summaries.filter((c) => c.reused).length;
  const engineMs = summaries.reduce((a, c) => a + (c.reused ? 0 : c.engine_ms), 0);
  const artifacts = runArtifacts(
    keys,
    chunks.map((c) => c.index),
    p.review,
  );
  await removeStaleArtifacts(ctx.store, keys, new Set(artifacts), ctx.log);
  const startedAt = (await ctx.d.repo.get(row.id))?.started_at ?? new Date();
  return {
    workflow_id: row.id,
    request_id: p.request_id,
    audio_duration_seconds: probed.duration_seconds,
    chunk_count: chunks.length,
    chunks_transcribed: chunks.length - reused,
    chunks_reused: reused,
    transcribed_audio_seconds: round3(transcribed.transcribedSeconds),
    engine_ms: Math.round(engineMs),
    wall_ms: Date.now() - startedAt.getTime(),
    runs: row.runs,
    concurrency: transcribed.concurrency,
    artifacts,
  };
}
