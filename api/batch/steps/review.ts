/**
 * Step `review` (only when the job asks for it): stage one annotates each
 * chunk (`review_chunk_{i}.json`), stage two corrects the whole transcript
 * (`reviewed_result.json`). The remote reviewer takes the stages it is
 * configured for; when it fails the offline reviewer does that stage.
 */
import type { RemoteReviewer } from '../review/llm.js';
import { annotateChunkOfflineAsync, correctOffline } from '../review/offline.js';
import type { ChunkReview } from '../review/types.js';
import type { RunContext } from '../run/context.js';
import type { BatchResult, ChunkCheckpoint } from '../types.js';

export async function review(
  ctx: RunContext,
  reviewer: RemoteReviewer,
  chunks: ChunkCheckpoint[],
  result: BatchResult,
): Promise<Record<string, unknown>> {
  const { store, keys, log, params: p } = ctx;
  const { config } = ctx.d;
  let annotateBy = 'offline';
  const reviews: ChunkReview[] = [];
  for (const c of chunks) {
    let r: ChunkReview | undefined;
    if (reviewer.enabledFor('annotate')) {
      try {
        r = await reviewer.annotate(c, p.metadata);
        annotateBy = reviewer.name;
      } catch (err) {
        log.warn({ err, chunk: c.index }, 'remote reviewer failed; offline annotation used');
      }
    }
    r ??= await annotateChunkOfflineAsync(c, p.metadata, config.review.lowConfidence, {
      maxTerms: config.review.maxTerms,
    });
    await store.putJson(keys.reviewChunk(c.index), r);
    reviews.push(r);
  }
  let corrected: ReturnType<typeof correctOffline> | undefined;
  let correctBy = 'offline';
  if (reviewer.enabledFor('correct')) {
    try {
      corrected = await reviewer.correct(result, reviews, p.metadata);
      correctBy = reviewer.name;
    } catch (err) {
      log.warn({ err }, 'remote reviewer failed; offline correction used');
    }
  }
  corrected ??= correctOffline(result, reviews);
  const reviewed = {
    ...corrected.result,
    changes: corrected.changes,
    reviewer: { annotate: annotateBy, correct: correctBy },
  };
  await store.putJson(keys.reviewedResult, reviewed);
  return {
    key: keys.reviewedResult,
    chunk_keys: chunks.map((c) => keys.reviewChunk(c.index)),
    issues: reviews.reduce((a, r) => a + r.issues.length, 0),
    changes: corrected.changes.length,
    reviewer: reviewed.reviewer,
  };
}
