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
import { isResponseFormat, renderTranscript } from '../shared/stt/formats.js';
import { safeEqual } from '../shared/auth/keys.js';
import type { BuiltinEngine } from '../shared/stt/builtin.js';
import { clientGone, receiveClip } from '../shared/http/upload.js';
import {
  decodeClip,
  invalidResponseFormat,
  supportedLanguage,
  transcribeClip,
} from '../shared/transcribe/clip.js';
import { HttpRefusal } from '../shared/http/refusal.js';
import { openAIErrorType } from '../shared/http/openaiErrors.js';
import { metricsRoute, SCRAPE_REFUSED, type MetricsPolicy } from '../shared/metrics/index.js';

export const ENGINE_SERVICE = 'stt-engine';

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
        raw instanceof HttpRefusal
          ? raw
          : new HttpRefusal(500, 'internal_error', 'An internal error occurred.');
      if (!(raw instanceof HttpRefusal)) logger.error({ err: raw }, 'request failed');
      ctx.status = err.status;
      for (const [k, v] of Object.entries(err.opts.headers ?? {})) ctx.set(k, v);
      ctx.body = {
        error: { message: err.message, type: openAIErrorType(err.status, err.opts.type), code: err.code },
      };
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
        throw new HttpRefusal(401, 'invalid_api_key', 'Missing or wrong API key.', {
          headers: { 'WWW-Authenticate': 'Bearer' },
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
      new HttpRefusal(401, 'metrics_unauthorized', SCRAPE_REFUSED, {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    router.get('/metrics', metricsRoute(metrics, refuse));
  }

  router.get('/v1/models', requireKey, (ctx) => {
    ctx.body = {
      object: 'list',
      data: [{ id: speech.segment.defaultModel, object: 'model', created, owned_by: 'stt-service' }],
    };
  });

  const maxSeconds = speech.engineServer.maxAudioSeconds;
  router.post('/v1/audio/transcriptions', requireKey, async (ctx) => {
    const policy = {
      tooLong: `The clip is longer than this worker's ${maxSeconds} s (ENGINE_MAX_AUDIO_SECONDS).`,
      failure: 'worker' as const,
    };
    const upload = await receiveClip(ctx, speech.segment.maxUploadBytes);
    const format = upload.fields.response_format ?? 'json';
    if (!isResponseFormat(format)) throw invalidResponseFormat();
    const language = supportedLanguage(engine.languages(), upload.fields.language);
    const signal = clientGone(ctx);
    const audio = await decodeClip(upload.file, { ...policy, audio: speech.audio, maxSeconds, signal });
    let result;
    try {
      // `model` is not passed on (this worker serves one), nor is a worker id.
      result = await transcribeClip(
        engine,
        audio,
        { language, prompt: upload.fields.prompt, signal },
        policy,
      );
    } finally {
      await audio.dispose();
    }
    const fields = { format };
    const rendered = renderTranscript(result, fields.format);
    ctx.set('X-Worker-Id', result.workerId);
    ctx.set('X-Engine-Ms', String(Math.round(result.engineMs)));
    ctx.type = rendered.contentType;
    ctx.body = rendered.body;
  });

  app.use(router.routes());
  app.use(router.allowedMethods());
  app.use((ctx) => {
    if (ctx.body === undefined)
      throw new HttpRefusal(404, 'not_found', `Unknown route ${ctx.method} ${ctx.path}.`);
  });
  return app;
}
