/**
 * Errors and their shapes. Each plane of the interface has its own error body
 * (section 7.2); a route group declares its plane once (`usePlane`) and every
 * error thrown below it is rendered in that shape by `errorHandler`.
 *
 * - api:    `{error: {message, type, code}}` (segment, session token, unknown routes)
 * - batch:  `{error: message, code}` (jobs, polls, artifacts)
 * - admin:  `{ok: false, error: {code, message, retryable}}`
 */
import type { Context, Middleware, Next } from 'koa';
import { isDependencyUnavailable } from '../../shared/process/index.js';
import { DEPENDENCY_RETRY_AFTER_SECONDS } from '../../shared/config/platform.js';
import { HttpRefusal } from '../../shared/http/refusal.js';
import { openAIErrorType } from '../../shared/http/openaiErrors.js';
import { DISK_RETRY_AFTER_SECONDS, isDiskFull } from '../../shared/disk.js';

export type Plane = 'api' | 'batch' | 'admin';

/** An HTTP refusal raised in the API (shared code raises HttpRefusal; both render the same way). */
export class ApiError extends HttpRefusal {
  override name = 'ApiError';
}

export function renderError(plane: Plane, err: ApiError): unknown {
  switch (plane) {
    case 'admin':
      return {
        ok: false,
        error: { code: err.code, message: err.message, retryable: err.opts.retryable ?? err.status >= 500 },
      };
    case 'batch':
      return { error: err.message, code: err.code };
    default:
      return {
        error: { message: err.message, type: openAIErrorType(err.status, err.opts.type), code: err.code },
      };
  }
}

export function usePlane(plane: Plane): Middleware {
  // Not async: it only passes the call on, and an async wrapper costs a promise per request.
  return (ctx: Context, next: Next) => {
    ctx.state.plane = plane;
    return next();
  };
}

/** Postgres "data exception" class (22xxx: a NUL byte in text, a malformed value): the input's fault. */
export function isDataException(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^22[0-9A-Z]{3}$/.test(code);
}

/** True for errors that mean the database (or Redis, S3, an engine) could not be reached. */
export const isStoreUnavailable = isDependencyUnavailable;

/** Translates errors thrown by body parsers and the like into ApiErrors. */
export function toApiError(
  err: unknown,
  plane: Plane,
  retryAfterSeconds = DEPENDENCY_RETRY_AFTER_SECONDS,
): ApiError {
  if (err instanceof ApiError) return err;
  // Refusals raised by shared code (the upload use case, shared/transcribe) already carry the answer.
  if (err instanceof HttpRefusal) return new ApiError(err.status, err.code, err.message, err.opts);
  const e = err as {
    status?: number;
    statusCode?: number;
    type?: string;
    message?: string;
    expose?: boolean;
  };
  const status = e?.status ?? e?.statusCode;
  if (status === 413 || e?.type === 'entity.too.large') {
    return new ApiError(413, 'payload_too_large', 'The request body is too large.');
  }
  if (e?.type === 'entity.parse.failed' || (status === 400 && /JSON/i.test(e?.message ?? ''))) {
    return new ApiError(400, 'invalid_json', 'The request body is not valid JSON.');
  }
  if (status && status >= 400 && status < 500 && e.expose) {
    return new ApiError(status, 'invalid_request', e.message ?? 'Bad request.');
  }
  if (isDataException(err)) {
    return new ApiError(400, 'invalid_request', 'The request contains a value the data store cannot hold.');
  }
  if (isDiskFull(err)) {
    return new ApiError(
      plane === 'admin' ? 500 : 507,
      'insufficient_storage',
      'The server has no disk space left for this request; try again shortly.',
      { retryable: true, headers: { 'Retry-After': String(DISK_RETRY_AFTER_SECONDS) } },
    );
  }
  if (isStoreUnavailable(err)) {
    return new ApiError(
      plane === 'admin' ? 500 : 503,
      'store_unavailable',
      'The data store is unavailable; try again shortly.',
      { retryable: true, headers: { 'Retry-After': String(retryAfterSeconds) } },
    );
  }
  return new ApiError(500, 'internal_error', 'An internal error occurred.', { retryable: true });
}

/**
 * Catches every error below it and renders it in the current plane's shape;
 * never leaks a stack. A dependency that is down answers 503 (admin: 500, as
 * the interface fixes) with Retry-After `retryAfterSeconds`.
 */
export function errorHandler(opts: { retryAfterSeconds?: number } = {}): Middleware {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
    } catch (raw) {
      const plane: Plane = ctx.state.plane ?? 'api';
      const err = toApiError(raw, plane, opts.retryAfterSeconds);
      // A full disk is the operator's to fix, not a bug: one warning line, no stack.
      if (err.code === 'insufficient_storage')
        ctx.state.log?.warn(
          { code: err.code, error: String((raw as Error)?.message) },
          'request refused: disk full',
        );
      else if (err.status >= 500) ctx.state.log?.error({ err: raw, code: err.code }, 'request failed');
      else ctx.state.log?.info({ code: err.code, status: err.status }, 'request refused');
      ctx.status = err.status;
      for (const [k, v] of Object.entries(err.opts.headers ?? {})) ctx.set(k, v);
      ctx.body = renderError(plane, err);
    }
  };
}
