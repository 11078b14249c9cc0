import type { Context, Middleware, Next } from 'koa';
import type { LimitsDriver, RateBucket, RateDecision } from '../../shared/limits/index.js';
import type { Principal } from '../../shared/auth/index.js';
import { ApiError } from './errors.js';

export interface RateLimitPolicy {
  bucket: RateBucket;
  /** Size of the per-minute bucket for this caller; undefined means unlimited. */
  perMinute(principal: Principal): number | undefined;
  /** What is counted, in the refusal message ("requests", "job polls"). */
  what: string;
}

/** The plan's maxRequestsPerMinute: transcription, submission and token routes. */
export const PLAN_REQUESTS: RateLimitPolicy = {
  bucket: 'requests',
  perMinute: (p) => p.limits.maxRequestsPerMinute,
  what: 'requests',
};

/**
 * A per-key rate limit shared by every API instance on one Redis, refused
 * with 429 and Retry-After in the plane's error shape. By default the plan's
 * maxRequestsPerMinute; other buckets (job polls) pass their own policy.
 */
export function requestRateLimit(limits: LimitsDriver, policy: RateLimitPolicy = PLAN_REQUESTS): Middleware {
  const decide = (ctx: Context, next: Next, d: RateDecision, perMinute: number) => {
    // Straight to Node: nothing has been sent yet, and Koa's ctx.set allocates per call.
    ctx.res.setHeader('X-RateLimit-Limit', String(d.limit));
    ctx.res.setHeader('X-RateLimit-Remaining', String(d.remaining));
    if (!d.allowed) {
      const retryAfter = String(Math.ceil(d.retryAfterMs / 1000));
      throw new ApiError(
        429,
        'rate_limit_exceeded',
        `Rate limit of ${perMinute} ${policy.what} per minute exceeded.`,
        {
          retryable: true,
          headers: { 'Retry-After': retryAfter },
        },
      );
    }
    return next();
  };
  // Not async, like requireApiKey: most requests are decided from this instance's reservation at once.
  return (ctx, next) => {
    const principal = ctx.state.principal as Principal;
    const perMinute = policy.perMinute(principal);
    if (perMinute === undefined) return next();
    const d = limits.consumeNow(policy.bucket, principal.keyId, perMinute);
    // Redis is asked only when this instance's reservation is spent.
    return d instanceof Promise
      ? d.then((x) => decide(ctx, next, x, perMinute))
      : decide(ctx, next, d, perMinute);
  };
}
