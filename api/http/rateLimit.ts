import type { Middleware } from 'koa';
import type { LimitsDriver, RateBucket } from '../../shared/limits/index.js';
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
  return async (ctx, next) => {
    const principal = ctx.state.principal;
    const perMinute = policy.perMinute(principal);
    if (perMinute === undefined) {
      await next();
      return;
    }
    const d = await limits.consume(policy.bucket, principal.keyId, perMinute);
    ctx.set('X-RateLimit-Limit', String(d.limit));
    ctx.set('X-RateLimit-Remaining', String(d.remaining));
    if (!d.allowed) {
      throw new ApiError(
        429,
        'rate_limit_exceeded',
        `Rate limit of ${perMinute} ${policy.what} per minute exceeded.`,
        { retryable: true, headers: { 'Retry-After': String(Math.ceil(d.retryAfterMs / 1000)) } },
      );
    }
    await next();
  };
}

/**
 * Reads that must never spend the plan's requests (job polls, models, own
 * usage): a per-key bucket of their own, POLL_REQUESTS_PER_MINUTE (0: unlimited).
 */
export function pollRateLimit(
  deps: { limits: LimitsDriver; config: { pollRequestsPerMinute: number } },
  what: string,
): Middleware {
  const perMinute = deps.config.pollRequestsPerMinute || undefined;
  return requestRateLimit(deps.limits, { bucket: 'polls', perMinute: () => perMinute, what });
}
