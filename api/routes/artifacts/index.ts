/**
 * GET /r2/{key} (interface 4.10): a stored JSON artifact of the calling
 * tenant, e.g. `transcription/{request_id}/result.json`. Keys resolve inside
 * the tenant's own key space, so another tenant's artifacts are simply not
 * there (404). Keys that try to leave it (`..`, absolute, backslashes, plain or
 * percent-encoded) are refused (404 `invalid_key`) before reaching storage.
 */
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { pollRateLimit } from '../../http/rateLimit.js';
import { ApiError, usePlane } from '../../http/errors.js';
import type { Route } from '../../http/routes.js';
import { pathParam } from '../../openapi/registry.js';
import { batchErrorSchema, tooManyRequests } from '../../openapi/schemas.js';
import { assertSafeKey, InvalidKeyError } from '../../batch/storage/index.js';

export const ARTIFACT_PREFIX = '/r2/';

/**
 * The key from the path (Koa's ctx.path is not percent-decoded), decoded once: clients that encode
 * path parameters send `transcription%2F{id}%2Fresult.json`. The decoded key is what is checked, so
 * an encoded `..` or leading `/` is refused like a plain one, and `%` is not a key character (a key
 * encoded twice is refused, never decoded again).
 */
export function artifactKeyFromPath(rawPath: string): string {
  try {
    return assertSafeKey(decodeURIComponent(rawPath.slice(ARTIFACT_PREFIX.length)));
  } catch (err) {
    // 404 like any key that names nothing (interface 7.2), with its own code.
    if (err instanceof InvalidKeyError || err instanceof URIError)
      throw new ApiError(404, 'invalid_key', 'Artifact not found: the key is not allowed.');
    throw err;
  }
}

export function routes(deps: AppDeps): Route[] {
  return [
    {
      method: 'get',
      path: '/r2/{*key}',
      chain: [
        usePlane('batch'),
        requireApiKey(deps.auth),
        // Reads share the poll budget (POLL_REQUESTS_PER_MINUTE): a tenant reading a large result in a
        // loop slowed every other tenant's requests (issue 41, third pass).
        pollRateLimit(deps, 'artifact reads'),
        async (ctx) => {
          const key = artifactKeyFromPath(ctx.path);
          const value = await deps.batch.readArtifact(ctx.state.principal.ownerId, key);
          if (value === null) throw new ApiError(404, 'artifact_not_found', 'Artifact not found.');
          ctx.set('Cache-Control', 'private, no-store');
          ctx.body = value;
        },
      ],
      doc: {
        operationId: 'getArtifact',
        summary: 'Read a stored JSON artifact of the calling tenant',
        description:
          'Keys: `transcription/{request_id}/chunk_{i}.json`, `result.json`, `review_chunk_{i}.json`, `reviewed_result.json`. The key may contain slashes, sent as they are or percent-encoded (`%2F`). Only the tenant that created the job can read them.',
        tags: ['batch'],
        security: 'apiKey',
        parameters: [
          pathParam('key', { type: 'string' }, 'Object key, e.g. `transcription/{request_id}/result.json`.'),
        ],
        responses: {
          '200': { description: 'The stored JSON document.', schema: { type: 'object' } },
          '401': { description: 'Authentication failed.', schema: batchErrorSchema },
          '429': tooManyRequests(
            'Read rate limit exceeded (`POLL_REQUESTS_PER_MINUTE` per key, shared with job polls).',
            batchErrorSchema,
          ),
          '404': {
            description:
              'No such artifact for this tenant (`artifact_not_found`), or a key that is not allowed (`invalid_key`: traversal, absolute, encoded characters).',
            schema: batchErrorSchema,
          },
        },
      },
    },
  ];
}
