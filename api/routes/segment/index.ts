/**
 * POST /v1/audio/transcriptions (interface 2.6, 4.6, 7.2): one short clip in
 * a multipart form, transcribed synchronously.
 *
 * The same path also carries the deprecated JSON job submission (4.4), which
 * belongs to the batch plane: this route hands a JSON body to the jobs
 * route's submission chain; a body that is neither multipart nor JSON is
 * answered 400 `invalid_content_type`.
 *
 * Chain: plane `api` errors, API key, request rate (maxRequestsPerMinute),
 * multipart upload (capped), decode, plan checks, speech engine, usage.
 */
import { randomUUID } from 'node:crypto';
import type { Context, Middleware } from 'koa';
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { requestRateLimit } from '../../http/rateLimit.js';
import { chain, type Route } from '../../http/routes.js';
import { compile, describeAjvError } from '../../http/validate.js';
import { apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';
import type { Principal } from '../../../shared/auth/index.js';
import {
  AudioDecodeError,
  AudioTooLongError,
  decodeAudio,
  pcmDurationSeconds,
} from '../../../shared/audio/index.js';
import { isMultipart, parseAudioUpload, UploadError } from '../../../shared/audio/upload.js';
import {
  normalizeLanguage,
  renderTranscript,
  RESPONSE_FORMATS,
  SpeechError,
} from '../../../shared/stt/index.js';
import { windowUsage } from '../../../shared/usage.js';
import {
  segmentFieldsSchema,
  segmentRequestSchema,
  verboseJsonSchema,
  type SegmentFields,
} from './schemas.js';
import { deprecatedJobRequestBody, deprecatedJobResponses, submitChain } from '../jobs/index.js';
import { sendTranscriptStream, wantsStream } from '../openai/stream.js';

export const SEGMENT_PATH = '/v1/audio/transcriptions';

/** The form's text fields checked against their schema; an empty field counts as absent. */
function formFields(raw: Record<string, string>): SegmentFields {
  const fields = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== ''));
  const validate = compile(segmentFieldsSchema);
  if (validate(fields)) return fields as SegmentFields;
  const e = validate.errors?.[0];
  if (e?.instancePath === '/response_format') {
    throw new ApiError(
      400,
      'invalid_response_format',
      `response_format must be one of ${RESPONSE_FORMATS.join(', ')}.`,
    );
  }
  throw new ApiError(400, 'invalid_request', describeAjvError(e, 'form'));
}

function isJsonBody(ctx: Context): boolean {
  return Boolean(ctx.request.is('application/json', '+json'));
}

function speechFailure(err: SpeechError): ApiError {
  switch (err.code) {
    case 'unsupported_language':
    case 'unknown_worker':
      return new ApiError(400, err.code, err.message);
    case 'aborted':
      // The client went away; nobody reads this answer, the log line records it (nginx's 499).
      return new ApiError(499, 'client_closed_request', err.message);
    case 'engine_overloaded':
      return new ApiError(503, err.code, err.message, { retryable: true, headers: { 'Retry-After': '2' } });
    default:
      // Interface 7.2: all worker attempts failed.
      return new ApiError(502, 'transcription_failed', `Transcription failed: ${err.message}`, {
        retryable: true,
        type: 'invalid_request_error',
      });
  }
}

/** The segment transcription itself (after auth and rate limit). */
export function segmentHandler(deps: AppDeps): Middleware {
  const cfg = deps.config.speech;
  return async (ctx) => {
    if (!isMultipart(ctx)) {
      throw new ApiError(
        400,
        'invalid_content_type',
        'The request body must be multipart/form-data with a "file" field.',
      );
    }
    if (!deps.ledger.accepting) {
      // Postgres has been unreachable so long that the usage spool is full: no unbilled work.
      throw new ApiError(503, 'usage_unavailable', 'Usage cannot be recorded right now; retry later.', {
        retryable: true,
        headers: { 'Retry-After': '30' },
      });
    }
    const principal = ctx.state.principal as Principal;
    const engine = deps.speech;
    // The window's usage so far does not depend on this clip: ask while the upload is read and decoded.
    const usedSoFar = windowUsage(deps.db, principal.keyId, deps.config.usageWindowSeconds);
    usedSoFar.catch(() => {}); // awaited below; a failure must not surface as an unhandled rejection first

    let upload;
    try {
      upload = await parseAudioUpload(ctx, cfg.segment.maxUploadBytes);
    } catch (err) {
      if (err instanceof UploadError) throw new ApiError(err.status, err.code, err.message);
      throw err;
    }
    if (!upload.file) throw new ApiError(400, 'missing_file', 'The multipart field "file" is required.');
    const fields = formFields(upload.fields);
    const format = fields.response_format;
    // OpenAI's `stream: true`: the same transcript as transcription stream events (text deltas, then done).
    const stream = wantsStream(fields.stream);
    const language = normalizeLanguage(fields.language);
    const supported = engine.languages();
    if (language && !supported.includes('*') && !supported.includes(language)) {
      throw new ApiError(
        400,
        'unsupported_language',
        `Language "${fields.language}" is not supported (supported: ${supported.join(', ')}).`,
      );
    }
    const workerId = fields.worker_id;

    const aborter = new AbortController();
    ctx.res.once('close', () => !ctx.res.writableFinished && aborter.abort());
    const maxSeconds = principal.limits.maxAudioSecondsPerRequest;
    let pcm: Buffer;
    try {
      pcm = await decodeAudio(upload.file.data, {
        ffmpegPath: cfg.audio.ffmpegPath,
        timeoutMs: cfg.audio.decodeTimeoutMs,
        maxSeconds,
        signal: aborter.signal,
      });
    } catch (err) {
      if (err instanceof AudioTooLongError) {
        throw new ApiError(
          400,
          'audio_too_long',
          `The clip is longer than the ${maxSeconds} s your plan allows per request.`,
        );
      }
      if (err instanceof AudioDecodeError) {
        if (err.code === 'invalid_audio') throw new ApiError(400, 'invalid_audio', err.message);
        throw new ApiError(503, 'decoder_unavailable', err.message, { retryable: true });
      }
      throw err;
    }
    const seconds = pcmDurationSeconds(pcm);

    // The plan's rolling audio budget covers segment uploads too.
    const windowLimit = principal.limits.maxAudioSecondsPerWindow;
    const used = await usedSoFar;
    if (used + seconds > windowLimit) {
      throw new ApiError(
        429,
        'audio_quota_exhausted',
        `The audio budget of ${windowLimit} s per window is exhausted.`,
        {
          retryable: true,
          headers: { 'Retry-After': '60' },
        },
      );
    }

    let result;
    try {
      result = await engine.transcribe({
        pcm,
        language,
        prompt: fields.prompt,
        model: fields.model,
        workerId,
        signal: aborter.signal,
      });
    } catch (err) {
      if (err instanceof SpeechError) throw speechFailure(err);
      throw err;
    }

    // Every transcribed clip is billed, silent or empty ones included. The
    // reference is generated here: a client-chosen X-Request-Id must not
    // collide with (and so cancel) another bill.
    await deps.ledger.record({
      keyId: principal.keyId,
      plane: 'segment',
      audioSeconds: seconds,
      refId: `seg_${randomUUID()}`,
    });

    ctx.set('X-Worker-Id', result.workerId);
    ctx.set('X-Fallback-Used', result.fallbackUsed ? '1' : '0');
    ctx.set('X-Engine-Ms', String(Math.round(result.engineMs)));
    if (stream) return sendTranscriptStream(ctx, result);
    const rendered = renderTranscript({ ...result, duration: Math.round(seconds * 1000) / 1000 }, format);
    ctx.type = rendered.contentType;
    ctx.body = rendered.body;
  };
}

export function routes(deps: AppDeps): Route[] {
  const segment = chain([
    usePlane('api'),
    requireApiKey(deps.auth),
    requestRateLimit(deps.limits),
    segmentHandler(deps),
  ]);
  const deprecatedJobSubmit = chain(submitChain(deps, { deprecated: true }));
  return [
    {
      method: 'post',
      path: SEGMENT_PATH,
      chain: [(ctx, next) => (isJsonBody(ctx) ? deprecatedJobSubmit(ctx, next) : segment(ctx, next))],
      doc: {
        operationId: 'transcribeSegment',
        summary: 'Transcribe one short clip synchronously (multipart)',
        description:
          'OpenAI-compatible. Every clip is transcribed and billed, silence included. A JSON body on this path is the deprecated job submission (see /v1/audio/transcriptions/jobs).',
        tags: ['segment'],
        security: 'apiKey',
        requestBody: [
          { contentType: 'multipart/form-data', schema: segmentRequestSchema },
          deprecatedJobRequestBody,
        ],
        responses: {
          ...deprecatedJobResponses,
          '200': {
            description:
              'Transcript in the requested response_format (verbose_json by default; json `{text}`; text, srt, vtt as text); with `stream=true`, text/event-stream of OpenAI transcription stream events',
            schema: verboseJsonSchema,
            headers: {
              'X-Worker-Id': { description: 'Worker that produced the result', schema: { type: 'string' } },
              'X-Fallback-Used': {
                description: '`1` if a fallback worker answered, else `0`',
                schema: { type: 'string', enum: ['0', '1'] },
              },
            },
          },
          '400': {
            description:
              '`invalid_content_type`, `invalid_multipart`, `missing_file`, `invalid_audio`, `audio_too_long`, `unsupported_language`, `unknown_worker`, `invalid_response_format`',
            schema: apiErrorSchema,
          },
          '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
          '413': {
            description:
              '`file_too_large`: upload above SEGMENT_MAX_UPLOAD_MB; `too_many_files` (> 4), `too_many_fields` (> 100), `fields_too_large` (> 64 KiB of fields)',
            schema: apiErrorSchema,
          },
          '429': tooManyRequests('`rate_limit_exceeded` or `audio_quota_exhausted`', apiErrorSchema),
          '502': {
            description: '`transcription_failed`: all worker attempts failed',
            schema: apiErrorSchema,
          },
          '503': {
            description:
              '`engine_overloaded`, `decoder_unavailable`, `store_unavailable`, `usage_unavailable`',
            schema: apiErrorSchema,
          },
        },
      },
    },
  ];
}
