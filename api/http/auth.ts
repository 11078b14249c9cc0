/**
 * Authentication middleware for the transcription routes (API keys) and the
 * admin routes (operator token). The key logic lives in shared/auth so the
 * realtime tier uses exactly the same rules.
 */
import type { Middleware } from 'koa';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { Authenticator, type AuthFailure } from '../../shared/auth/index.js';
import { safeEqual } from '../../shared/auth/keys.js';
import { ApiError } from './errors.js';

export function authError(f: AuthFailure): ApiError {
  return new ApiError(f.status, f.code, f.message, {
    retryable: f.status === 503,
    headers:
      f.status === 401 ? { 'WWW-Authenticate': 'Bearer' } : f.status === 503 ? { 'Retry-After': '2' } : {},
  });
}

/** Requires `Authorization: Bearer sk-…`; sets ctx.state.principal. */
export function requireApiKey(auth: Authenticator): Middleware {
  return async (ctx, next) => {
    const { token, failure } = Authenticator.bearer(ctx.get('authorization') || undefined);
    if (failure) throw authError(failure);
    // Session tokens are for the realtime upgrade only; HTTP routes take API keys.
    const result = await auth.authenticateApiKey(token!);
    if (!result.ok) throw authError(result);
    ctx.state.principal = result.principal;
    await next();
  };
}

/**
 * Operator routes: `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`, compared in
 * constant time. Wrong tokens are counted per client address: past
 * `failuresPerMinute` the address gets 429 until its minute is over, even
 * with the right token (a guesser learns nothing from the answers).
 */
export function requireAdmin(auth: {
  adminToken: string | undefined;
  adminFailuresPerMinute: number;
}): Middleware {
  const { adminToken, adminFailuresPerMinute: failuresPerMinute } = auth;
  // One count per app (its admin and usage routes share it).
  let failures = counters.get(auth);
  if (!failures && failuresPerMinute > 0) {
    failures = new RateLimiterMemory({ points: failuresPerMinute, duration: 60 });
    counters.set(auth, failures);
  }
  return async (ctx, next) => {
    const blocked = failures && (await failures.get(ctx.ip));
    if (blocked && blocked.consumedPoints > failuresPerMinute) throw throttled(blocked.msBeforeNext);
    const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (!adminToken || !m || !safeEqual(m[1], adminToken)) {
      if (failures) {
        const r = await failures.penalty(ctx.ip, 1);
        if (r.consumedPoints > failuresPerMinute) throw throttled(r.msBeforeNext);
      }
      throw new ApiError(401, 'admin_unauthorized', 'Missing or wrong admin token.', {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
    await next();
  };
}

const counters = new WeakMap<object, RateLimiterMemory>();

function throttled(msBeforeNext: number): ApiError {
  return new ApiError(
    429,
    'rate_limit_exceeded',
    'Too many wrong admin tokens from this address; try again later.',
    {
      retryable: true,
      headers: { 'Retry-After': String(Math.max(1, Math.ceil(msBeforeNext / 1000))) },
    },
  );
}
