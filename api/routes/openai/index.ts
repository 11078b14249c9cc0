/**
 * The rest of the OpenAI surface an SDK touches: GET /v1/models (what this
 * deployment can run), GET /v1/models/{model}, and OpenAI endpoints this
 * service does not offer (translations, speech synthesis, chat, ...), which
 * answer 404 in OpenAI's error shape with a message that says so and names
 * what is offered, instead of an anonymous "unknown route".
 */
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { pollRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { apiErrorSchema } from '../../openapi/schemas.js';
import type { Config } from '../../../shared/config/index.js';

const CREATED = Math.floor(Date.now() / 1000);

/** OpenAI API paths (first segment after /v1) that this service does not serve, with what they are. */
const NOT_OFFERED: Record<string, string> = {
  'audio/translations': 'translation into English',
  'audio/speech': 'speech synthesis',
  chat: 'chat completions',
  completions: 'text completions',
  responses: 'responses',
  embeddings: 'embeddings',
  images: 'image generation',
  moderations: 'moderation',
  files: 'file storage',
  uploads: 'uploads',
  batches: 'the Batch API (use POST /v1/audio/transcriptions/jobs)',
  fine_tuning: 'fine-tuning',
  assistants: 'assistants',
  threads: 'threads',
  vector_stores: 'vector stores',
  realtime: 'the Realtime API (use WS /v1/audio/transcriptions/stream)',
};

const OFFERED =
  'It offers POST /v1/audio/transcriptions (json, text, verbose_json, srt, vtt; stream=true), GET /v1/models, and its own realtime and batch endpoints (see /docs).';

const modelSchema = {
  type: 'object',
  required: ['id', 'object', 'created', 'owned_by'],
  properties: {
    id: { type: 'string' },
    object: { const: 'model' },
    created: { type: 'integer' },
    owned_by: { type: 'string' },
  },
} as const;

/** The model ids this deployment answers with: the built-in engine's, or the one sent to remote workers. */
export function deploymentModels(
  config: Config,
): { id: string; object: 'model'; created: number; owned_by: string }[] {
  const id =
    config.speech.engine === 'remote' ? config.speech.remote.model : config.speech.segment.defaultModel;
  return [{ id, object: 'model', created: CREATED, owned_by: config.serviceName }];
}

const NOT_OFFERED_PATHS = new RegExp(
  `^/v1/(${Object.keys(NOT_OFFERED)
    .map((n) => n.replace('/', '\\/'))
    .join('|')})(/.*)?$`,
);

const modelErrors = {
  '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
  '429': { description: '`rate_limit_exceeded`', schema: apiErrorSchema },
};

export function routes(deps: AppDeps): Route[] {
  const guard = [usePlane('api'), requireApiKey(deps.auth), pollRateLimit(deps, 'reads')];
  const models = deploymentModels(deps.config);
  return [
    {
      method: 'get',
      path: '/v1/models',
      chain: [
        ...guard,
        (ctx) => {
          ctx.body = { object: 'list', data: models };
        },
      ],
      doc: {
        operationId: 'listModels',
        summary: 'Models this deployment can run (OpenAI-compatible)',
        tags: ['openai'],
        security: 'apiKey',
        responses: {
          '200': {
            description: 'Model list',
            schema: {
              type: 'object',
              required: ['object', 'data'],
              properties: { object: { const: 'list' }, data: { type: 'array', items: modelSchema } },
            },
          },
          ...modelErrors,
        },
      },
    },
    {
      method: 'get',
      path: '/v1/models/:model',
      chain: [
        ...guard,
        (ctx) => {
          const model = models.find((m) => m.id === ctx.params.model);
          if (!model) {
            throw new ApiError(
              404,
              'model_not_found',
              `The model "${ctx.params.model.slice(0, 100)}" does not exist here. Models: ${models.map((m) => m.id).join(', ')}.`,
            );
          }
          ctx.body = model;
        },
      ],
      doc: {
        operationId: 'getModel',
        summary: 'One model (OpenAI-compatible)',
        tags: ['openai'],
        security: 'apiKey',
        parameters: [{ name: 'model', in: 'path', required: true, schema: { type: 'string' } }],
        responses: {
          '200': { description: 'Model', schema: modelSchema },
          '404': { description: '`model_not_found`', schema: apiErrorSchema },
          ...modelErrors,
        },
      },
    },
    {
      method: 'all',
      path: NOT_OFFERED_PATHS,
      chain: [
        usePlane('api'),
        (ctx) => {
          const what = NOT_OFFERED[/^\/v1\/(audio\/\w+|\w+)/.exec(ctx.path)![1]];
          throw new ApiError(
            404,
            'endpoint_not_offered',
            `This speech-to-text service does not offer ${ctx.method} ${ctx.path} (${what}). ${OFFERED}`,
          );
        },
      ],
    },
  ];
}
