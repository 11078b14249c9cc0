/**
 * Bounds of a job's free-form `metadata`, checked at submission before
 * anything serializes or walks it recursively: nesting depth, serialized
 * size, and the number of terms the offline reviewer would take from it.
 * Each refusal names the limit (decisions: Batch input limits).
 */
import type { MetadataLimits } from '../../shared/config/batch.js';
import { REVIEW_MAX_TERM_LENGTH, termsFromMetadata } from './review/terms.js';

/** Why `metadata` is refused, or undefined when it is within the limits. */
export function metadataProblem(
  metadata: unknown,
  limits: MetadataLimits,
  maxTerms: number,
): string | undefined {
  if (metadata === undefined) return undefined;
  // Iterative: a body nested thousands of levels deep must not overflow the stack here.
  const stack: [unknown, number][] = [[metadata, 0]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (typeof v === 'string' && v.includes('\u0000'))
      return 'Field "metadata" holds a NUL character (\\u0000).';
    if (v === null || typeof v !== 'object') continue;
    if (depth >= limits.maxDepth) {
      return `Field "metadata" is nested more than ${limits.maxDepth} levels deep.`;
    }
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1]);
    // Keys too: Postgres's jsonb cannot hold a NUL anywhere.
    if (!Array.isArray(v)) for (const k of Object.keys(v)) stack.push([k, depth + 1]);
  }
  const bytes = Buffer.byteLength(JSON.stringify(metadata));
  if (bytes > limits.maxBytes) {
    return `Field "metadata" is ${bytes} bytes as JSON; the limit is ${limits.maxBytes} bytes.`;
  }
  if (termsFromMetadata(metadata as Record<string, unknown>, maxTerms + 1).length > maxTerms) {
    return (
      `Field "metadata" holds more than ${maxTerms} distinct terms ` +
      `(strings of up to ${REVIEW_MAX_TERM_LENGTH} characters, split at commas, semicolons and new lines).`
    );
  }
  return undefined;
}
