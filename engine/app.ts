/**
 * The speech worker's HTTP face: an OpenAI-compatible subset, so that the
 * remote pool (and any OpenAI client) can use it.
 *
 *   POST /v1/audio/transcriptions  multipart: file, model, language, prompt,
 *                                  response_format json|text|verbose_json|srt|vtt
 *   GET  /v1/models                the one model this worker serves
 *   GET  /health                   {ok, service}; 503 until a decoder is loaded
 *   GET  /readyz                   the same, and 503 once the worker is draining (SIGTERM), so
 *                                  load balancers and the remote pool stop sending it work
 *
 * `model` is accepted and ignored: a worker serves exactly one model, and
 * OpenAI clients send names such as `whisper-1`.
 */
import Koa, { type Context } from 'koa';
import Router from '@koa/router';
import type { Logger } from 'pino';
import type { SpeechConfig } from '../shared/config/speech.js';
import { AudioDecodeError, AudioTooLongError, decodeAudio } from '../shared/audio/index.js';
import { isMultipart, parseAudioUpload, UploadError } from '../shared/audio/upload.js';
import { isResponseFormat, renderTranscript, RESPONSE_FORMATS } from '../shared/stt/formats.js';
import { normalizeLanguage } from '../shared/stt/language.js';
import { safeEqual } from '../shared/auth/keys.js';
import { SpeechError } from '../shared/stt/types.js';
import type { BuiltinEngine } from '../shared/stt/builtin.js';
import { metricsRoute, SCRAPE_REFUSED, type MetricsPolicy } from '../shared/metrics/index.js';

export const ENGINE_SERVICE = 'stt-engine';

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

function errorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

export interface EngineAppDeps {
  engine: BuiltinEngine;
  speech: SpeechConfig;
  logger: Logger;
  /** GET /metrics (Prometheus; METRICS_ENABLED, METRICS_TOKEN); on with no token when omitted. */
  metrics?: MetricsPolicy;
  /** True once the process is stopping: /readyz turns 503 while requests in flight finish. */
  draining?: () => boolean;
}

export function createEngineApp({
  engine,
  speech,
  logger,
  metrics = { enabled: true, token: undefined },
  draining = () => false,
}: EngineAppDeps): Koa {
  const app = new Koa();
  app.silent = true;
  const router = new Router();
  const created = Math.floor(Date.now() / 1000);

  app.use(async (ctx, next) => {
    const started = performance.now();
    try {
      await next();
    } catch (raw) {
      const err =
        raw instanceof HttpError ? raw : new HttpError(500, 'internal_error', 'An internal error occurred.');
      if (!(raw instanceof HttpError)) logger.error({ err: raw }, 'request failed');
      ctx.status = err.status;
      for (const [k, v] of Object.entries(err.headers)) ctx.set(k, v);
      ctx.body = { error: { message: err.message, type: errorType(err.status), code: err.code } };
    } finally {
      logger.debug(
        {
          method: ctx.method,
          path: ctx.path,
          status: ctx.status,
          ms: Math.round(performance.now() - started),
        },
        'request',
      );
    }
  });

  const requireKey = async (ctx: Context, next: () => Promise<unknown>) => {
    if (speech.engineServer.apiKey) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
      if (!m || !safeEqual(m[1], speech.engineServer.apiKey)) {
        throw new HttpError(401, 'invalid_api_key', 'Missing or wrong API key.', {
          'WWW-Authenticate': 'Bearer',
        });
      }
    }
    await next();
  };

  router.get('/health', async (ctx) => {
    const ok = await engine.healthy();
    ctx.status = ok ? 200 : 503;
    ctx.body = { ok, service: ENGINE_SERVICE, ...engine.stats() };
  });
  router.get('/readyz', async (ctx) => {
    const decoder = await engine.healthy();
    const accepting = !draining();
    const ok = decoder && accepting;
    ctx.status = ok ? 200 : 503;
    ctx.body = { ok, service: ENGINE_SERVICE, checks: { decoder, accepting } };
  });

  if (metrics.enabled) {
    const refuse = () =>
      new HttpError(401, 'metrics_unauthorized', SCRAPE_REFUSED, { 'WWW-Authenticate': 'Bearer' });
    router.get('/metrics', metricsRoute(metrics, refuse));
  }

  router.get('/v1/models', requireKey, (ctx) => {
    ctx.body = {
      object: 'list',
      data: [{ id: speech.segment.defaultModel, object: 'model', created, owned_by: 'stt-service' }],
    };
  });

  router.post('/v1/audio/transcriptions', requireKey, async (ctx) => {
    if (!isMultipart(ctx))
      throw new HttpError(400, 'invalid_content_type', 'The body must be multipart/form-data.');
    let upload;
    try {
      upload = await parseAudioUpload(ctx, speech.segment.maxUploadBytes);
    } catch (err) {
      if (err instanceof UploadError) throw new HttpError(err.status, err.code, err.message);
      throw err;
    }
    if (!upload.file) throw new HttpError(400, 'missing_file', 'The multipart field "file" is required.');
    const format = upload.fields.response_format ?? 'json';
    if (!isResponseFormat(format)) {
      throw new HttpError(
        400,
        'invalid_response_format',
        `response_format must be one of ${RESPONSE_FORMATS.join(', ')}.`,
      );
    }
    const language = normalizeLanguage(upload.fields.language);
    if (language && !engine.languages().includes(language)) {
      throw new HttpError(
        400,
        'unsupported_language',
        `Language "${upload.fields.language}" is not supported (supported: ${engine.languages().join(', ')}).`,
      );
    }
    const aborter = new AbortController();
    // The response closing before it was written means the client went away.
    ctx.res.once('close', () => !ctx.res.writableFinished && aborter.abort());
    let pcm: Buffer;
    try {
      pcm = await decodeAudio(upload.file.data, {
        ffmpegPath: speech.audio.ffmpegPath,
        timeoutMs: speech.audio.decodeTimeoutMs,
        maxSeconds: speech.engineServer.maxAudioSeconds,
        signal: aborter.signal,
      });
    } catch (err) {
      if (err instanceof AudioDecodeError && err.code === 'invalid_audio')
        throw new HttpError(400, 'invalid_audio', err.message);
      if (err instanceof AudioTooLongError) {
        throw new HttpError(
          400,
          'audio_too_long',
          `The clip is longer than this worker's ${speech.engineServer.maxAudioSeconds} s (ENGINE_MAX_AUDIO_SECONDS).`,
        );
      }
      if (err instanceof AudioDecodeError) throw new HttpError(503, 'decoder_unavailable', err.message);
      throw err;
    }
    let result;
    try {
      result = await engine.transcribe({
        pcm,
        language,
        prompt: upload.fields.prompt,
        signal: aborter.signal,
      });
    } catch (err) {
      if (err instanceof SpeechError) {
        if (err.code === 'unsupported_language') throw new HttpError(400, err.code, err.message);
        if (err.code === 'engine_overloaded')
          throw new HttpError(503, err.code, err.message, { 'Retry-After': '1' });
        throw new HttpError(500, 'transcription_failed', err.message);
      }
      throw err;
    }
    const rendered = renderTranscript(result, format);
    ctx.set('X-Worker-Id', result.workerId);
    ctx.set('X-Engine-Ms', String(Math.round(result.engineMs)));
    ctx.type = rendered.contentType;
    ctx.body = rendered.body;
  });

  app.use(router.routes());
  app.use(router.allowedMethods());
  app.use(async (ctx) => {
    if (ctx.body === undefined)
      throw new HttpError(404, 'not_found', `Unknown route ${ctx.method} ${ctx.path}.`);
  });
  return app;
}
