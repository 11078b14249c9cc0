/**
 * Batch jobs (interface 2.1–2.3, 4.3–4.5, 9.3): submission on the preferred
 * path and the two deprecated JSON forms, polling on three paths. Errors use
 * the batch shape `{error, code}`. Only the submitting tenant sees a
 * workflow; everyone else gets the same 404 as for an unknown id.
 */
import type Router from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { requestRateLimit } from '../../http/rateLimit.js';
import { check } from '../../http/validate.js';
import { pathParam } from '../../openapi/registry.js';
import { batchErrorSchema, rateLimitHeaders } from '../../openapi/schemas.js';
import { batchRuntime } from '../../batch/runtime.js';
import {
  jobAcceptedSchema,
  jobRequestSchema,
  WORKFLOW_ID_PATTERN,
  WORKFLOW_ID_RE,
  workflowStatusSchema,
} from '../../batch/schemas.js';
import type { JobRequest } from '../../batch/types.js';
import { metadataProblem } from '../../batch/metadata.js';
import { normalizeLanguage } from '../../../shared/stt/language.js';

export const JOBS_PATH = '/v1/audio/transcriptions/jobs';

const DEPRECATION_HEADERS = {
  Deprecation: 'true',
  Link: `<${JOBS_PATH}>; rel="successor-version"`,
};

/** Validates a parsed JSON body and queues the job; the caller has authenticated. */
export function submitHandler(deps: AppDeps): Middleware {
  return async (ctx: Context) => {
    const body = check<JobRequest>(jobRequestSchema, ctx.request.body, 'body', 'invalid_request');
    const { batch } = deps.config;
    const problem = metadataProblem(body.metadata, batch.metadata, batch.review.maxTerms);
    if (problem) throw new ApiError(400, 'invalid_request', problem);
    const runtime = batchRuntime(deps);
    for (const field of ['audio_url', 'webhook_url'] as const) {
      const url = body[field];
      if (url !== undefined && !runtime.destinationAllowed(url)) {
        throw new ApiError(
          400,
          'invalid_request',
          `Field "${field}" must be a public http(s) URL (loopback and private addresses are refused unless the server setting OUTBOUND_ALLOW lists them).`,
        );
      }
    }
    // A language the engine cannot serve would only fail later, chunk by chunk.
    const language = normalizeLanguage(body.language);
    const supported = deps.speech?.languages() ?? ['*'];
    if (language && !supported.includes('*') && !supported.includes(language)) {
      throw new ApiError(
        400,
        'unsupported_language',
        `Language "${body.language}" is not supported (supported: ${supported.join(', ')}).`,
      );
    }
    const accepted = await runtime.submit(ctx.state.principal, body);
    ctx.state.log?.info(
      { workflowId: accepted.workflow_id, requestId: accepted.request_id },
      'batch job accepted',
    );
    ctx.status = 202;
    ctx.set('Location', `${JOBS_PATH}/${accepted.workflow_id}`);
    ctx.body = accepted;
  };
}

/** The whole submission chain (plane, auth, rate limit, JSON body, validation, queue). */
export function submitChain(deps: AppDeps, opts: { deprecated?: boolean } = {}): Middleware[] {
  const chain: Middleware[] = [
    usePlane('batch'),
    async (ctx, next) => {
      if (opts.deprecated) ctx.set(DEPRECATION_HEADERS);
      await next();
    },
    requireApiKey(deps.auth),
    requestRateLimit(deps.limits),
    jsonBody(deps.config.http.maxJsonBytes),
    submitHandler(deps),
  ];
  return chain;
}

function compose(chain: Middleware[]): Middleware {
  return (ctx, next) => {
    const run = (i: number): Promise<void> =>
      i === chain.length ? next() : Promise.resolve(chain[i](ctx, () => run(i + 1)));
    return run(0);
  };
}

/**
 * The deprecated JSON submission on `POST /v1/audio/transcriptions`: JSON
 * bodies only; anything else belongs to the segment route and passes on.
 */
export function deprecatedJsonSubmit(deps: AppDeps): Middleware {
  const submit = compose(submitChain(deps, { deprecated: true }));
  return async (ctx: Context, next: Next) => {
    if (!ctx.request.is('application/json', '+json')) return next();
    await submit(ctx, async () => {});
  };
}

export function pollHandler(deps: AppDeps): Middleware {
  return async (ctx: Context) => {
    const id = ctx.params.workflowId as string;
    const body = WORKFLOW_ID_RE.test(id)
      ? await batchRuntime(deps).poll(ctx.state.principal.ownerId, id)
      : undefined;
    if (body === undefined) throw new ApiError(404, 'workflow_not_found', `Workflow ${id} not found.`);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = body;
  };
}

/** Job polls: a per-key bucket of their own (POLL_REQUESTS_PER_MINUTE), so polling never spends the plan's requests. */
function pollRateLimit(deps: AppDeps): Middleware {
  const perMinute = deps.config.pollRequestsPerMinute || undefined;
  return requestRateLimit(deps.limits, { bucket: 'polls', perMinute: () => perMinute, what: 'job polls' });
}

export function register(router: Router, deps: AppDeps): void {
  const auth = requireApiKey(deps.auth);
  const limit = pollRateLimit(deps);
  const handler = pollHandler(deps);
  const poll: Middleware = (ctx, next) => limit(ctx, () => handler(ctx, next));

  router.post(JOBS_PATH, ...submitChain(deps));
  router.post('/', ...submitChain(deps, { deprecated: true }));
  router.post('/v1/audio/transcriptions', deprecatedJsonSubmit(deps));

  router.get(`${JOBS_PATH}/:workflowId`, usePlane('batch'), auth, poll);
  // The alias paths also match other single-segment paths; only workflow ids are ours.
  for (const path of ['/v1/audio/transcriptions/:workflowId', '/:workflowId']) {
    router.get(path, async (ctx, next) => {
      if (!WORKFLOW_ID_RE.test(ctx.params.workflowId as string)) return next();
      ctx.state.plane = 'batch';
      await auth(ctx, () => poll(ctx, next));
    });
  }

  describe(deps);
}

/**
 * OpenAPI pieces for the owner of `POST /v1/audio/transcriptions` (the
 * segment route) to list the deprecated JSON job submission on that path:
 * add `deprecatedJobRequestBody` to its requestBody list and
 * `deprecatedJobResponses` to its responses.
 */
export const deprecatedJobRequestBody = {
  contentType: 'application/json',
  schema: { $ref: '#/components/schemas/TranscriptionJobRequest' },
  required: false,
  description: 'Deprecated: JSON job submission (use POST /v1/audio/transcriptions/jobs).',
};
export const deprecatedJobResponses = {
  '202': {
    description: 'Deprecated JSON form: job accepted (`Deprecation: true`, `Link` to the successor).',
    schema: { $ref: '#/components/schemas/TranscriptionJobAccepted' },
    headers: {
      Deprecation: { description: 'Always `true`.', schema: { type: 'string' } },
      Link: {
        description: '`</v1/audio/transcriptions/jobs>; rel="successor-version"`',
        schema: { type: 'string' },
      },
    },
  },
};

function describe(deps: AppDeps): void {
  const api = deps.openapi;
  const request = api.component('TranscriptionJobRequest', jobRequestSchema);
  const accepted = api.component('TranscriptionJobAccepted', jobAcceptedSchema);
  const status = api.component('WorkflowStatus', workflowStatusSchema);
  const error = api.component('BatchError', batchErrorSchema);
  const submitResponses = {
    '202': { description: 'Accepted; poll the workflow.', schema: accepted },
    '400': {
      description: 'Body is not JSON, or `audio_url` missing/invalid, or another field invalid.',
      schema: error,
    },
    '401': { description: 'Authentication failed.', schema: error },
    '429': { description: 'Request rate limit exceeded.', schema: error, headers: rateLimitHeaders },
  };
  const deprecationHeaders = {
    Deprecation: { description: 'Always `true`.', schema: { type: 'string' } },
    Link: {
      description: '`</v1/audio/transcriptions/jobs>; rel="successor-version"`',
      schema: { type: 'string' },
    },
  };
  api.add({
    method: 'post',
    path: JOBS_PATH,
    operationId: 'createTranscriptionJob',
    summary: 'Submit a batch transcription job',
    description:
      'Fetches `audio_url` (temporarily), slices it at pauses near every `segment_seconds`, transcribes `concurrency` chunks at a time, aggregates, optionally reviews and calls the webhook. Chunks are checkpointed under `transcription/{request_id}/`; resubmitting the same `request_id` skips chunks already stored.',
    tags: ['batch'],
    security: 'apiKey',
    requestBody: [{ contentType: 'application/json', schema: request }],
    responses: submitResponses,
  });
  api.add({
    method: 'post',
    path: '/',
    operationId: 'createTranscriptionJobLegacy',
    summary: 'Deprecated: submit a batch job (use POST /v1/audio/transcriptions/jobs)',
    tags: ['batch'],
    security: 'apiKey',
    deprecated: true,
    requestBody: [{ contentType: 'application/json', schema: request }],
    responses: { ...submitResponses, '202': { ...submitResponses['202'], headers: deprecationHeaders } },
  });
  const idParam = pathParam(
    'workflowId',
    { type: 'string', pattern: WORKFLOW_ID_PATTERN },
    '`cf_` followed by 64 hex characters.',
  );
  const pollOps: [string, string, boolean][] = [
    [`${JOBS_PATH}/{workflowId}`, 'getTranscriptionJob', false],
    ['/v1/audio/transcriptions/{workflowId}', 'getTranscriptionJobAlias', true],
    ['/{workflowId}', 'getTranscriptionJobLegacy', true],
  ];
  for (const [path, operationId, deprecated] of pollOps) {
    api.add({
      method: 'get',
      path,
      operationId,
      summary: deprecated ? 'Poll a batch job (alias)' : 'Poll a batch job',
      tags: ['batch'],
      security: 'apiKey',
      ...(deprecated ? { deprecated: true } : {}),
      parameters: [idParam],
      responses: {
        '200': {
          description: 'Workflow status; `output` when complete, `error` when errored.',
          schema: status,
        },
        '401': { description: 'Authentication failed.', schema: error },
        '404': { description: 'No such workflow for this tenant.', schema: error },
        '429': {
          description: 'Job poll rate limit exceeded (`POLL_REQUESTS_PER_MINUTE` per key).',
          schema: error,
          headers: rateLimitHeaders,
        },
      },
    });
  }
}
