import type { Middleware } from 'koa';
import type { LimitsDriver } from '../../shared/limits/index.js';
import type { Principal } from '../../shared/auth/index.js';
import { ApiError } from './errors.js';

/**
 * The plan's maxRequestsPerMinute, per key, shared by every API instance on
 * one Redis. Refused with 429 and Retry-After in the plane's error shape.
 */
export function requestRateLimit(limits: LimitsDriver): Middleware {
  return async (ctx, next) => {
    const principal = ctx.state.principal as Principal;
    const perMinute = principal.limits.maxRequestsPerMinute;
    let d = limits.consumeNow('requests', principal.keyId, perMinute);
    if (d instanceof Promise) d = await d; // Redis is asked only when this instance's reservation is spent
    // Straight to Node: nothing has been sent yet, and Koa's ctx.set allocates per call.
    ctx.res.setHeader('X-RateLimit-Limit', String(d.limit));
    ctx.res.setHeader('X-RateLimit-Remaining', String(d.remaining));
    if (!d.allowed) {
      const retryAfter = String(Math.ceil(d.retryAfterMs / 1000));
      throw new ApiError(429, 'rate_limit_exceeded', `Rate limit of ${perMinute} requests per minute exceeded.`, {
        retryable: true,
        headers: { 'Retry-After': retryAfter },
      });
    }
    await next();
  };
}
