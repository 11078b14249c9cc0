/**
 * Authentication middleware for the transcription routes (API keys) and the
 * admin routes (operator token). The key logic lives in shared/auth so the
 * realtime tier uses exactly the same rules.
 */
import type { Middleware } from 'koa';
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

/** Operator routes: `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`, compared in constant time. */
export function requireAdmin(adminToken: string | undefined): Middleware {
  return async (ctx, next) => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (!adminToken || !m || !safeEqual(m[1], adminToken)) {
      throw new ApiError(401, 'admin_unauthorized', 'Missing or wrong admin token.', {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
    await next();
  };
}
