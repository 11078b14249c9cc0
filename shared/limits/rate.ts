import {
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import type { Redis } from 'ioredis';
import type { RateBucket, RateDecision } from './types.js';

/**
 * One rate-limiter-flexible limiter per (bucket, size), created on first use:
 * plans differ in their per-minute sizes, and a limiter's size is fixed.
 * With Redis every instance counts in the same keys, so together they admit
 * at most the limit; a key that has used its minute is refused from memory
 * until the window ends (`inMemoryBlockOnConsumed`), and when Redis cannot be
 * reached each instance keeps limiting on its own (insurance limiter).
 */
export class RateLimiters {
  private readonly limiters = new Map<string, RateLimiterAbstract>();

  constructor(
    private readonly redis: Redis | null,
    private readonly prefix: string,
  ) {}

  private limiter(bucket: RateBucket, perMinute: number): RateLimiterAbstract {
    const id = `${bucket}:${perMinute}`;
    let l = this.limiters.get(id);
    if (!l) {
      const opts = { points: perMinute, duration: 60, keyPrefix: `${this.prefix}rl:${bucket}:${perMinute}` };
      l = this.redis
        ? new RateLimiterRedis({
            ...opts,
            storeClient: this.redis,
            rejectIfRedisNotReady: true,
            // Once a key has used its minute, refuse it from memory until the window ends.
            inMemoryBlockOnConsumed: perMinute,
            // When Redis cannot be reached each instance keeps limiting on its own.
            insuranceLimiter: new RateLimiterMemory(opts),
          })
        : new RateLimiterMemory(opts);
      this.limiters.set(id, l);
    }
    return l;
  }

  /** Takes one point of `owner`'s per-minute bucket. */
  async consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    if (perMinute <= 0) return { allowed: false, retryAfterMs: 60_000, remaining: 0, limit: 0 };
    try {
      const res = await this.limiter(bucket, perMinute).consume(owner, 1);
      return { allowed: true, retryAfterMs: 0, remaining: res.remainingPoints, limit: perMinute };
    } catch (rej) {
      if (rej instanceof RateLimiterRes) {
        return {
          allowed: false,
          retryAfterMs: Math.max(1, rej.msBeforeNext),
          remaining: 0,
          limit: perMinute,
        };
      }
      throw rej;
    }
  }
}
