/**
 * Batch jobs (interface 2.1–2.3, 4.3–4.5, 9.3): submission on the preferred
 * path and the two deprecated JSON forms, polling on three paths. Errors use
 * the batch shape `{error, code}`. Only the submitting tenant sees a
 * workflow; everyone else gets the same 404 as for an unknown id.
 */
import type { Context, Middleware } from 'koa';
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { pollRateLimit, requestRateLimit } from '../../http/rateLimit.js';
import type { OperationDoc, Route } from '../../http/routes.js';
import { check } from '../../http/validate.js';
import { componentRef, pathParam } from '../../openapi/registry.js';
import { tooManyRequests } from '../../openapi/schemas.js';
import { jobRequestSchema, WORKFLOW_ID_PATTERN, WORKFLOW_ID_RE } from '../../batch/schemas.js';
import { TooManyJobsError } from '../../batch/runtime.js';
import type { JobRequest } from '../../batch/types.js';
import { metadataProblem } from '../../batch/metadata.js';
import { supportedLanguage } from '../../../shared/transcribe/clip.js';

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
    const runtime = deps.batch;
    for (const field of ['audio_url', 'webhook_url'] as const) {
      const url = body[field];
      const refusal = url === undefined ? null : runtime.destinationRefusal(url);
      if (refusal) {
        throw new ApiError(
          400,
          'invalid_request',
          `Field "${field}" must be a public http(s) URL: ${refusal}`,
        );
      }
    }
    // A language the engine cannot serve would only fail later, chunk by chunk.
    supportedLanguage(deps.speech.languages(), body.language);
    const accepted = await runtime.submit(ctx.state.principal, body).catch((err: unknown) => {
      if (err instanceof TooManyJobsError)
        throw new ApiError(429, 'too_many_jobs', err.message, {
          retryable: true,
          headers: { 'Retry-After': '30' },
        });
      throw err;
    });
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

export function pollHandler(deps: AppDeps): Middleware {
  return async (ctx: Context) => {
    const id = (ctx.params as { workflowId: string }).workflowId;
    const body = WORKFLOW_ID_RE.test(id) ? await deps.batch.poll(ctx.state.principal.ownerId, id) : undefined;
    if (body === undefined) throw new ApiError(404, 'workflow_not_found', `Workflow ${id} not found.`);
    ctx.set('Cache-Control', 'no-store');
    // The body is the response's JSON text as kept for the workflow (api/batch/poll.ts).
    ctx.set('Content-Type', 'application/json; charset=utf-8');
    ctx.body = body;
  };
}

/** DELETE: the tenant cancels its own job (queued or running); a finished one is 409. */
export function cancelHandler(deps: AppDeps): Middleware {
  return async (ctx: Context) => {
    const id = (ctx.params as { workflowId: string }).workflowId;
    const done = WORKFLOW_ID_RE.test(id)
      ? await deps.batch.cancel(ctx.state.principal.ownerId, id)
      : undefined;
    if (done === undefined) throw new ApiError(404, 'workflow_not_found', `Workflow ${id} not found.`);
    const status = (JSON.parse(done.poll) as { status: string }).status;
    if (!done.ended && status !== 'terminated')
      throw new ApiError(
        409,
        'workflow_finished',
        status === 'running'
          ? `Workflow ${id} has its result already (its webhook is being delivered); there is nothing to cancel.`
          : `Workflow ${id} has already ended (${status}); there is nothing to cancel.`,
      );
    if (done.ended) ctx.state.log?.info({ workflowId: id }, 'batch job cancelled');
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Content-Type', 'application/json; charset=utf-8');
    ctx.body = done.poll;
  };
}

/** The `{workflowId}` path parameter of the poll and cancel operations. */
const WORKFLOW_ID_PARAM = pathParam(
  'workflowId',
  { type: 'string', pattern: WORKFLOW_ID_PATTERN },
  '`cf_` followed by 64 hex characters.',
);

const DEPRECATION_HEADER_DOCS = {
  Deprecation: { description: 'Always `true`.', schema: { type: 'string' } },
  Link: {
    description: '`</v1/audio/transcriptions/jobs>; rel="successor-version"`',
    schema: { type: 'string' },
  },
};

/**
 * OpenAPI pieces for the route of `POST /v1/audio/transcriptions` (the
 * segment route) to list the deprecated JSON job submission on that path:
 * add `deprecatedJobRequestBody` to its requestBody list and
 * `deprecatedJobResponses` to its responses.
 */
export const deprecatedJobRequestBody = {
  contentType: 'application/json',
  schema: componentRef('TranscriptionJobRequest'),
  required: false,
  description: 'Deprecated: JSON job submission (use POST /v1/audio/transcriptions/jobs).',
};
export const deprecatedJobResponses = {
  '202': {
    description: 'Deprecated JSON form: job accepted (`Deprecation: true`, `Link` to the successor).',
    schema: componentRef('TranscriptionJobAccepted'),
    headers: DEPRECATION_HEADER_DOCS,
  },
};

const SUBMIT_RESPONSES = {
  '202': { description: 'Accepted; poll the workflow.', schema: componentRef('TranscriptionJobAccepted') },
  '400': {
    description: 'Body is not JSON, or `audio_url` missing/invalid, or another field invalid.',
    schema: componentRef('BatchError'),
  },
  '401': { description: 'Authentication failed.', schema: componentRef('BatchError') },
  '429': tooManyRequests(
    'Request rate limit exceeded, or `too_many_jobs`: the tenant already has BATCH_MAX_UNFINISHED_PER_TENANT jobs queued or running.',
    componentRef('BatchError'),
  ),
  '507': {
    description: '`insufficient_storage`: the server is below its disk floor (DISK_FLOOR_MB); `Retry-After`.',
    schema: componentRef('BatchError'),
  },
};

function pollDoc(operationId: string, deprecated: boolean): OperationDoc {
  const error = componentRef('BatchError');
  return {
    operationId,
    summary: deprecated ? 'Poll a batch job (alias)' : 'Poll a batch job',
    tags: ['batch'],
    security: 'apiKey',
    ...(deprecated ? { deprecated: true } : {}),
    parameters: [WORKFLOW_ID_PARAM],
    responses: {
      '200': {
        description: 'Workflow status; `output` when complete, `error` when errored.',
        schema: componentRef('WorkflowStatus'),
      },
      '401': { description: 'Authentication failed.', schema: error },
      '404': { description: 'No such workflow for this tenant.', schema: error },
      '429': tooManyRequests('Job poll rate limit exceeded (`POLL_REQUESTS_PER_MINUTE` per key).', error),
    },
  };
}

export function routes(deps: AppDeps): Route[] {
  const auth = requireApiKey(deps.auth);
  const limit = pollRateLimit(deps, 'job polls');
  const handler = pollHandler(deps);
  const poll: Middleware = async (ctx, next) => {
    await limit(ctx, async () => {
      await handler(ctx, next);
    });
  };
  // The alias paths also match other single-segment paths; only workflow ids are ours.
  const pollAlias: Middleware = async (ctx, next) => {
    if (!WORKFLOW_ID_RE.test((ctx.params as { workflowId: string }).workflowId)) {
      await next();
      return;
    }
    ctx.state.plane = 'batch';
    await auth(ctx, async () => {
      await poll(ctx, next);
    });
  };
  const request = componentRef('TranscriptionJobRequest');
  return [
    {
      method: 'post',
      path: JOBS_PATH,
      chain: submitChain(deps),
      doc: {
        operationId: 'createTranscriptionJob',
        summary: 'Submit a batch transcription job',
        description:
          'Fetches `audio_url` (temporarily), slices it at pauses near every `segment_seconds`, transcribes `concurrency` chunks at a time, aggregates, optionally reviews and calls the webhook. Chunks are checkpointed under `transcription/{request_id}/`; resubmitting the same `request_id` skips chunks already stored.',
        tags: ['batch'],
        security: 'apiKey',
        requestBody: [{ contentType: 'application/json', schema: request }],
        responses: SUBMIT_RESPONSES,
      },
    },
    {
      method: 'post',
      path: '/',
      chain: submitChain(deps, { deprecated: true }),
      doc: {
        operationId: 'createTranscriptionJobLegacy',
        summary: 'Deprecated: submit a batch job (use POST /v1/audio/transcriptions/jobs)',
        tags: ['batch'],
        security: 'apiKey',
        deprecated: true,
        requestBody: [{ contentType: 'application/json', schema: request }],
        responses: {
          ...SUBMIT_RESPONSES,
          '202': { ...SUBMIT_RESPONSES['202'], headers: DEPRECATION_HEADER_DOCS },
        },
      },
    },
    {
      method: 'get',
      path: `${JOBS_PATH}/:workflowId`,
      chain: [usePlane('batch'), auth, poll],
      doc: pollDoc('getTranscriptionJob', false),
    },
    {
      method: 'delete',
      path: `${JOBS_PATH}/:workflowId`,
      chain: [usePlane('batch'), auth, requestRateLimit(deps.limits), cancelHandler(deps)],
      doc: {
        operationId: 'cancelTranscriptionJob',
        summary: 'Cancel a batch job',
        description:
          'A queued or running job ends as `terminated` (`error.name` `cancelled`); a running one stops at once, or at the next heartbeat of its pg-boss job (at most half of BATCH_HEARTBEAT_SECONDS later) when another process runs it. The chunks it had transcribed are billed; a resubmission with the same `request_id` reuses them without billing them again. Cancelling a terminated job again answers it as it is.',
        tags: ['batch'],
        security: 'apiKey',
        parameters: [WORKFLOW_ID_PARAM],
        responses: {
          '200': { description: 'The workflow, now `terminated`.', schema: componentRef('WorkflowStatus') },
          '401': { description: 'Authentication failed.', schema: componentRef('BatchError') },
          '404': { description: 'No such workflow for this tenant.', schema: componentRef('BatchError') },
          '409': {
            description:
              '`workflow_finished`: it is complete or errored, or has its result and only its webhook is left.',
            schema: componentRef('BatchError'),
          },
          '429': tooManyRequests('Request rate limit exceeded.', componentRef('BatchError')),
        },
      },
    },
    {
      method: 'get',
      path: '/v1/audio/transcriptions/:workflowId',
      chain: [pollAlias],
      doc: pollDoc('getTranscriptionJobAlias', true),
    },
    {
      method: 'get',
      path: '/:workflowId',
      chain: [pollAlias],
      doc: pollDoc('getTranscriptionJobLegacy', true),
    },
  ];
}
