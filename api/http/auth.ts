/**
 * Authentication middleware for the transcription routes (API keys) and the
 * admin routes (operator token). The key logic lives in shared/auth so the
 * realtime tier uses exactly the same rules.
 */
import type { Context, Middleware, Next } from 'koa';
import { Authenticator, type AuthFailure, type AuthResult, authFailure } from '../../shared/auth/index.js';
import { safeEqual } from '../../shared/auth/keys.js';
import { ApiError } from './errors.js';

export function authError(f: AuthFailure): ApiError {
  return new ApiError(f.status, f.code, f.message, {
    retryable: f.status === 503,
    headers:
      f.status === 401 ? { 'WWW-Authenticate': 'Bearer' } : f.status === 503 ? { 'Retry-After': '2' } : {},
  });
}

/**
 * The last well-formed Authorization header of a keep-alive connection and
 * its key's hash: a client sends the same key on every request of a
 * connection, so the SHA-256 is computed once per connection, not per request.
 * Kept on the socket, so it goes when the connection does. Only the lookup is
 * saved: every request is still checked against the key cache (revocation).
 */
const LAST_KEY = Symbol('stt.lastApiKey');
type KeyedSocket = { [LAST_KEY]?: { header: string; hash: string } };

/**
 * Requires `Authorization: Bearer sk-…`; sets ctx.state.principal. Not an
 * async function: a cached key is answered at once and the call passed on
 * without a promise of its own (koa-compose turns a synchronous throw into a
 * rejection).
 */
export function requireApiKey(auth: Authenticator): Middleware {
  const admit = (ctx: Context, next: Next, result: AuthResult) => {
    if (!result.ok) throw authError(result);
    ctx.state.principal = result.principal;
    return next();
  };
  return (ctx, next) => {
    const header = ctx.req.headers.authorization;
    const socket = (ctx.req.socket ?? {}) as unknown as KeyedSocket;
    let hash =
      header !== undefined && socket[LAST_KEY]?.header === header ? socket[LAST_KEY].hash : undefined;
    if (hash === undefined) {
      const { token, failure } = Authenticator.bearer(header);
      if (failure) throw authError(failure);
      // Session tokens are for the realtime upgrade only; HTTP routes take API keys.
      hash = auth.keyHash(token!);
      if (hash === undefined) throw authError(authFailure('invalid_api_key'));
      socket[LAST_KEY] = { header: header!, hash };
    }
    const result = auth.checkKeyHash(hash);
    // The key store is asked only when the cache entry is stale.
    return result instanceof Promise ? result.then((r) => admit(ctx, next, r)) : admit(ctx, next, result);
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
