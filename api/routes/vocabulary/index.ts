/**
 * A key's vocabulary (issue 37): words, with optional spoken forms, that bias
 * the built-in engine on every request of the key, on every plane, without
 * repeating them in each prompt. The key owner keeps its own key's list at
 * `/v1/vocabulary`; the operator keeps any key's under the admin prefix.
 * Each word must be pronounceable (the dictionary, its spoken forms or the
 * letter-to-sound rules give it a pronunciation), or the request gets 400
 * `unpronounceable_words` naming them. Other instances see a change within
 * the key cache's lifetime (KEY_CACHE_TTL_MS).
 */
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';
import type { KeyRow } from '../../../shared/auth/index.js';
import { promptBias, UnpronounceableError, type VocabularyEntry } from '../../../shared/stt/bias/index.js';
import { requireAdmin, requireApiKey } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, isStoreUnavailable, usePlane } from '../../http/errors.js';
import { pollRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { check, compile } from '../../http/validate.js';
import { pathParam } from '../../openapi/registry.js';
import { adminEnvelope, apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';
import { ADMIN_PREFIX, adminDoc, adminErrors } from '../admin/index.js';
import { keyIdParam } from '../admin/schemas.js';
import { PRINTABLE_TEXT } from '../../../shared/validation.js';

export const VOCABULARY_PATH = '/v1/vocabulary';
/** Entries a key may keep; each word and spoken form is bounded too. */
export const MAX_VOCABULARY_ENTRIES = 500;

export const vocabularySchema = {
  type: 'object',
  additionalProperties: false,
  required: ['words'],
  properties: {
    words: {
      type: 'array',
      maxItems: MAX_VOCABULARY_ENTRIES,
      description: 'The words the engine should expect, written as transcripts should write them.',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['word'],
        properties: {
          word: {
            type: 'string',
            minLength: 1,
            maxLength: 64,
            // A letter, and nothing that is not text (controls, direction overrides, line breaks).
            allOf: [{ pattern: '\\p{L}' }, { pattern: PRINTABLE_TEXT }],
            description: 'A word or short phrase, e.g. `Kubernetes`, `HAProxy`, `Saoirse Ronan`.',
          },
          spoken: {
            type: 'array',
            maxItems: 4,
            items: {
              type: 'string',
              minLength: 1,
              maxLength: 100,
              allOf: [{ pattern: '\\p{L}' }, { pattern: PRINTABLE_TEXT }],
            },
            description: 'How it is said, in words the dictionary knows: `HAProxy` → `h a proxy`.',
          },
        },
      },
    },
  },
} as const;

type Body = { words: VocabularyEntry[] };

export function routes(deps: AppDeps): Route[] {
  const { keys, auth, config } = deps;
  const validKeyId = compile(keyIdParam);
  const guard = async <T>(work: () => Promise<T>, plane: 'api' | 'admin'): Promise<T> => {
    try {
      return await work();
    } catch (err) {
      if (!isStoreUnavailable(err)) throw err;
      throw new ApiError(
        plane === 'admin' ? 500 : 503,
        'store_unavailable',
        'The key store is unavailable; try again shortly.',
        {
          retryable: true,
        },
      );
    }
  };

  /** Validates and stores a key's list (null: none); answers with what is stored. */
  const store = async (
    ctx: Context,
    keyId: string,
    entries: VocabularyEntry[] | null,
    plane: 'api' | 'admin',
  ) => {
    if (entries && entries.length > 0) {
      const bias = promptBias(config.speech.builtin);
      try {
        bias?.compiler.check(entries);
      } catch (err) {
        if (!(err instanceof UnpronounceableError)) throw err;
        throw new ApiError(400, 'unpronounceable_words', err.message);
      }
    }
    const row = await guard(() => keys.setVocabulary(keyId, entries), plane);
    if (!row) throw new ApiError(404, 'key_not_found', 'No key with that id.');
    auth.invalidate(row);
    return present(row);
  };
  const present = (row: KeyRow) => ({ words: row.vocabulary ?? [] });

  const own = (method: 'get' | 'put' | 'delete'): Route => ({
    method,
    path: VOCABULARY_PATH,
    chain: [
      usePlane('api'),
      requireApiKey(auth),
      pollRateLimit(deps, 'reads'),
      ...(method === 'put' ? [jsonBody(config.http.maxJsonBytes)] : []),
      async (ctx) => {
        const keyId = ctx.state.principal.keyId;
        if (method === 'get') {
          const row = await guard(() => keys.get(keyId), 'api');
          ctx.body = row ? present(row) : { words: [] };
        } else if (method === 'put') {
          ctx.body = await store(
            ctx,
            keyId,
            check<Body>(vocabularySchema, ctx.request.body, 'body').words,
            'api',
          );
        } else ctx.body = await store(ctx, keyId, null, 'api');
      },
    ],
    doc: {
      operationId: { get: 'getVocabulary', put: 'putVocabulary', delete: 'deleteVocabulary' }[method],
      summary: {
        get: "The calling key's vocabulary",
        put: "Replace the calling key's vocabulary",
        delete: "Clear the calling key's vocabulary",
      }[method],
      description:
        "Words that bias the built-in engine on every request of this key (segment, batch, realtime, OpenAI endpoints), beside each request's `prompt`. Remote workers are not sent it. Counted against POLL_REQUESTS_PER_MINUTE.",
      tags: ['vocabulary'],
      security: 'apiKey',
      ...(method === 'put'
        ? { requestBody: [{ contentType: 'application/json', schema: vocabularySchema, required: true }] }
        : {}),
      responses: {
        '200': { description: 'The stored vocabulary', schema: vocabularySchema },
        ...(method === 'put'
          ? {
              '400': {
                description: '`invalid_request`, `invalid_json` or `unpronounceable_words`',
                schema: apiErrorSchema,
              },
            }
          : {}),
        '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
        '429': tooManyRequests('`rate_limit_exceeded`', apiErrorSchema),
      },
    },
  });

  const idParam = pathParam('id', keyIdParam, 'Key id');
  const admin = (method: 'get' | 'put' | 'delete'): Route => ({
    method,
    path: `${ADMIN_PREFIX}/keys/:id/vocabulary`,
    chain: [
      usePlane('admin'),
      requireAdmin(config.auth),
      ...(method === 'put' ? [jsonBody(config.http.maxJsonBytes)] : []),
      async (ctx) => {
        const id = String(ctx.params.id);
        if (!validKeyId(id)) throw new ApiError(404, 'key_not_found', 'No key with that id.');
        let data;
        if (method === 'get') {
          const row = await guard(() => keys.get(id), 'admin');
          if (!row) throw new ApiError(404, 'key_not_found', 'No key with that id.');
          data = present(row);
        } else if (method === 'put')
          data = await store(ctx, id, check<Body>(vocabularySchema, ctx.request.body, 'body').words, 'admin');
        else data = await store(ctx, id, null, 'admin');
        ctx.body = { ok: true, data };
      },
    ],
    doc: adminDoc({
      operationId: { get: 'adminGetVocabulary', put: 'adminPutVocabulary', delete: 'adminDeleteVocabulary' }[
        method
      ],
      summary: {
        get: "A key's vocabulary",
        put: "Replace a key's vocabulary",
        delete: "Clear a key's vocabulary",
      }[method],
      parameters: [idParam],
      ...(method === 'put'
        ? { requestBody: [{ contentType: 'application/json', schema: vocabularySchema, required: true }] }
        : {}),
      responses: {
        '200': { description: 'The stored vocabulary', schema: adminEnvelope(vocabularySchema) },
        ...adminErrors(method === 'put' ? ['400', '401', '404', '500'] : ['401', '404', '500']),
      },
    }),
  });

  return [own('get'), own('put'), own('delete'), admin('get'), admin('put'), admin('delete')];
}
