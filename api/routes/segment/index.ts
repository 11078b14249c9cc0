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
 * audio window not used up, multipart upload (capped), decode, plan checks
 * (the clip's seconds reserved in the window), speech engine, usage.
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
import { renderTranscript } from '../../../shared/stt/index.js';
import { clientGone, receiveClip } from '../../../shared/http/upload.js';
import {
  DECODES_PER_PROCESS,
  decodeClip,
  invalidResponseFormat,
  supportedLanguage,
  transcribeClip,
} from '../../../shared/transcribe/clip.js';
import type { TranscribeResult } from '../../../shared/stt/types.js';
import { round3 } from '../../../shared/numbers.js';
import type { UsageBudget } from '../../../shared/usage/budget.js';
import {
  segmentFieldsSchema,
  segmentRequestSchema,
  verboseJsonSchema,
  type SegmentFields,
} from './schemas.js';
import { inTurn } from './turn.js';
import { FairShare } from '../../../shared/fairShare.js';
import { deprecatedJobRequestBody, deprecatedJobResponses, submitChain } from '../jobs/index.js';
import { streamPieces, TranscriptStream, wantsStream } from '../openai/stream.js';

export const SEGMENT_PATH = '/v1/audio/transcriptions';

/** The form's text fields checked against their schema; an empty field counts as absent. */
function formFields(raw: Record<string, string>): SegmentFields {
  const fields = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== ''));
  const validate = compile(segmentFieldsSchema);
  if (validate(fields)) return fields as SegmentFields;
  const e = validate.errors?.[0];
  if (e?.instancePath === '/response_format') throw invalidResponseFormat();
  throw new ApiError(400, 'invalid_request', describeAjvError(e, 'form'));
}

function isJsonBody(ctx: Context): boolean {
  return Boolean(ctx.request.is('application/json', '+json'));
}

/** The segment transcription itself (after auth and rate limit): the shared upload use case, then billing. */
export function segmentHandler(deps: AppDeps): Middleware {
  const cfg = deps.config.speech;
  const { budget } = deps;
  // A key keeps to its share even alone (SEGMENT_KEY_SHARE=1 gives it everything): a newcomer's clip
  // starts at once instead of after one of the busy key's clips.
  const perKey = Math.max(1, Math.floor(DECODES_PER_PROCESS * cfg.segment.keyShare));
  const share = new FairShare(DECODES_PER_PROCESS, perKey, false);
  return async (ctx) => {
    const principal = ctx.state.principal;
    const maxSeconds = principal.limits.maxAudioSecondsPerRequest;
    const policy = {
      tooLong: `The clip is longer than the ${maxSeconds} s your plan allows per request.`,
      failure: 'gateway' as const,
    };
    if (!deps.ledger.accepting) {
      // Postgres has been unreachable so long that the usage spool is full: no unbilled work.
      throw new ApiError(503, 'usage_unavailable', 'Usage cannot be recorded right now; retry later.', {
        retryable: true,
        headers: { 'Retry-After': '30' },
      });
    }
    // A key whose window is used up (billed, or held by work in flight) is refused before its upload is
    // read and decoded, so it takes no decode slot; the reservation below would refuse its clip anyway
    // (an empty clip too is refused here). A window with room left is decided by the reservation.
    const windowLimit = principal.limits.maxAudioSecondsPerWindow;
    const usedBefore = await budget.used(principal.keyId);
    if (usedBefore >= windowLimit)
      throw await quotaExhausted(budget, principal.keyId, windowLimit, usedBefore, 0);
    const upload = await receiveClip(ctx, cfg.segment.maxUploadBytes);
    const form = formFields(upload.fields);
    const language = supportedLanguage(deps.speech.languages(), form.language);
    const signal = clientGone(ctx);
    const audio = await decodeClip(upload.file, {
      ...policy,
      audio: cfg.audio,
      maxSeconds,
      signal,
      key: principal.keyId,
    });
    // The bill's reference, generated here: a client-chosen X-Request-Id must not collide with (and
    // so cancel) another bill. The clip's budget reservation carries it too.
    const reservation = budget.reservation({
      plane: 'segment',
      refId: `seg_${randomUUID()}`,
      keyId: principal.keyId,
    });
    try {
      // The plan's rolling audio budget covers segment uploads too: the clip's seconds are reserved
      // before the engine runs, so concurrent uploads cannot overspend the window.
      const decision = await reservation.reserve({
        seconds: audio.seconds,
        limit: windowLimit,
        ttlSeconds: RESERVATION_TTL_SECONDS,
      });
      if (!decision.ok)
        throw await quotaExhausted(budget, principal.keyId, windowLimit, decision.used, audio.seconds);
      // OpenAI's `stream: true`: transcription stream events, each piece's words as soon as they are decoded.
      const stream = wantsStream(form.stream) ? new TranscriptStream(ctx) : undefined;
      let result: TranscribeResult;
      try {
        // The clip's turn in the engine among this process's clips: a key past its share waits in its own line.
        result = await inTurn(share, principal.keyId, signal, async () =>
          transcribeClip(
            deps.speech,
            audio,
            {
              language,
              prompt: form.prompt,
              vocabulary: principal.vocabulary,
              model: form.model,
              workerId: form.worker_id,
              signal,
            },
            policy,
            stream && { slices: await streamPieces(audio, deps.config.batch), onPiece: stream.onPiece },
          ),
        );
      } catch (err) {
        if (!stream?.started) throw err;
        // Words were sent: the stream ends with the error (a failed clip is not billed, streamed or not).
        ctx.state.log?.warn({ err }, 'streamed transcription failed after its first words');
        return stream.fail(err);
      }
      // Every transcribed clip is billed, silent or empty ones included (the bill ends the reservation).
      await reservation.bill(audio.seconds);
      if (stream) return stream.done(result);
      respond(ctx, { response_format: form.response_format }, audio.seconds, result);
    } finally {
      await audio.dispose();
      // Billed (the bill ended it) or failed: the reservation has done its work.
      void reservation.release();
    }
  };
}

/**
 * 429 `audio_quota_exhausted` for a clip of `seconds` (0: before it is read) that does not fit what
 * is left of the key's window (`used` of `windowLimit`), with Retry-After when enough of its billed
 * audio ages out of the window (the window rolls: it can be hours); the message says which it is,
 * used up or too little left.
 */
async function quotaExhausted(
  budget: UsageBudget,
  keyId: string,
  windowLimit: number,
  used: number,
  seconds: number,
): Promise<ApiError> {
  const excess = used + Math.max(seconds, 0.001) - windowLimit;
  const wait =
    seconds > windowLimit ? undefined : await budget.secondsUntilFreed(keyId, excess).catch(() => undefined);
  const left = Math.max(0, windowLimit - used);
  const when = wait === undefined ? '' : ` It fits again in ${wait} s.`;
  const message =
    left > 0 && seconds > 0
      ? `This clip (${round3(seconds)} s) does not fit the ${round3(left)} s left of the audio budget ` +
        `(${windowLimit} s per window).${when}`
      : `The audio budget of ${windowLimit} s per window is used up.${when}`;
  return new ApiError(429, 'audio_quota_exhausted', message, {
    retryable: true,
    headers: { 'Retry-After': String(wait ?? QUOTA_RETRY_AFTER_SECONDS) },
  });
}

/** Retry-After of a refused clip when the key's bills cannot say when it fits (work in flight holds the window). */
const QUOTA_RETRY_AFTER_SECONDS = 60;

/** How long a clip's reservation holds if its process dies before billing it (longer than any request). */
const RESERVATION_TTL_SECONDS = 600;

function respond(
  ctx: Context,
  fields: { response_format: SegmentFields['response_format'] },
  seconds: number,
  result: TranscribeResult,
): void {
  ctx.set('X-Worker-Id', result.workerId);
  ctx.set('X-Fallback-Used', result.fallbackUsed ? '1' : '0');
  ctx.set('X-Engine-Ms', String(Math.round(result.engineMs)));
  const rendered = renderTranscript(
    { ...result, duration: Math.round(seconds * 1000) / 1000 },
    fields.response_format,
  );
  ctx.type = rendered.contentType;
  ctx.body = rendered.body;
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
      chain: [
        async (ctx, next) => {
          await (isJsonBody(ctx) ? deprecatedJobSubmit(ctx, next) : segment(ctx, next));
        },
      ],
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
          '507': {
            description:
              '`insufficient_storage`: the server is below its disk floor (DISK_FLOOR_MB) or its disk is full; `Retry-After`',
            schema: apiErrorSchema,
          },
        },
      },
    },
  ];
}
