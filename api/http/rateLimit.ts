import type { Context, Middleware, Next } from 'koa';
import type { LimitsDriver, RateDecision } from '../../shared/limits/index.js';
import type { Principal } from '../../shared/auth/index.js';
import { ApiError } from './errors.js';

/**
 * The plan's maxRequestsPerMinute, per key, shared by every API instance on
 * one Redis. Refused with 429 and Retry-After in the plane's error shape.
 */
export function requestRateLimit(limits: LimitsDriver): Middleware {
  const decide = (ctx: Context, next: Next, d: RateDecision, perMinute: number) => {
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
    return next();
  };
  // Not async, like requireApiKey: most requests are decided from this instance's reservation at once.
  return (ctx, next) => {
    const principal = ctx.state.principal as Principal;
    const perMinute = principal.limits.maxRequestsPerMinute;
    const d = limits.consumeNow('requests', principal.keyId, perMinute);
    // Redis is asked only when this instance's reservation is spent.
    return d instanceof Promise ? d.then((x) => decide(ctx, next, x, perMinute)) : decide(ctx, next, d, perMinute);
  };
}
