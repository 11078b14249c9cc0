/**
 * Names of a workflow's artifacts in the tenant's key space (interface 2.5,
 * 4.10): everything of one request lives under `transcription/{request_id}/`.
 *
 * | key | written by |
 * |---|---|
 * | `chunk_{i}.json` | transcribe (the chunk's checkpoint) |
 * | `result.json` | aggregate |
 * | `review_chunk_{i}.json` | review, stage one |
 * | `reviewed_result.json` | review, stage two |
 */

const ROOT = 'transcription';
const CHUNK = 'chunk_';
const RESULT = 'result';
const REVIEW_CHUNK = 'review_chunk_';
const REVIEWED_RESULT = 'reviewed_result';

/** The keys of one request's artifacts. */
export interface ArtifactKeys {
  /** `transcription/{request_id}/`: every key below starts with it. */
  readonly prefix: string;
  chunk(index: number): string;
  readonly result: string;
  reviewChunk(index: number): string;
  readonly reviewedResult: string;
  /** Whether `key` (under the prefix) names an artifact of this kind, whatever its chunk index. */
  isOwn(key: string): boolean;
}

/** A key directly under the prefix that the workflow writes (as opposed to anything else stored there). */
const OWN = new RegExp(`^(${CHUNK}\\d+|${REVIEW_CHUNK}\\d+|${REVIEWED_RESULT}|${RESULT})\\.json$`);

export function artifactKeys(requestId: string): ArtifactKeys {
  const prefix = `${ROOT}/${requestId}/`;
  return {
    prefix,
    chunk: (index) => `${prefix}${CHUNK}${index}.json`,
    result: `${prefix}${RESULT}.json`,
    reviewChunk: (index) => `${prefix}${REVIEW_CHUNK}${index}.json`,
    reviewedResult: `${prefix}${REVIEWED_RESULT}.json`,
    isOwn: (key) => key.startsWith(prefix) && OWN.test(key.slice(prefix.length)),
  };
}

/** The artifacts a complete run leaves, in the order its report lists them. */
export function runArtifacts(keys: ArtifactKeys, chunkIndexes: number[], review: boolean): string[] {
  return [
    ...chunkIndexes.map((i) => keys.chunk(i)),
    keys.result,
    ...(review ? [...chunkIndexes.map((i) => keys.reviewChunk(i)), keys.reviewedResult] : []),
  ];
}
