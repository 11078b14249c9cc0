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
  ) {
    // A RateLimiterRedis defines its Lua command on the client when it is constructed, and an
    // ioredis auto-pipeline copies the client's commands when it is opened: the first limiter made
    // while a pipeline was open called a command that pipeline lacked, and ioredis threw an
    // uncaught TypeError that stopped the process. Defining it now, before any command, closes that.
    if (redis) new RateLimiterRedis({ storeClient: redis, points: 1, duration: 1 });
  }

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

  /**
   * Takes one point of `owner`'s per-minute bucket. Calls for the same key
   * and bucket made in one turn of the event loop are counted by one call
   * that takes all their points at once (one Redis round trip for all of
   * them). The answer is exactly what the same calls made one by one would
   * get: the store counts every point, and the calls are allowed in order
   * while the count stays within the limit (`splitDecision`).
   */
  consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    if (perMinute <= 0)
      return Promise.resolve({ allowed: false, retryAfterMs: 60_000, remaining: 0, limit: 0 });
    const id = `${bucket}:${perMinute}:${owner}`;
    let batch = this.pending.get(id);
    if (!batch) {
      batch = { bucket, owner, perMinute, waiters: [] };
      this.pending.set(id, batch);
      if (this.pending.size === 1) setImmediate(this.flush);
    }
    const waiters = batch.waiters;
    return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
  }

  private readonly pending = new Map<string, PendingConsume>();

  private readonly flush = () => {
    const batches = [...this.pending.values()];
    this.pending.clear();
    for (const b of batches) void this.consumeBatch(b);
  };

  private async consumeBatch({ bucket, owner, perMinute, waiters }: PendingConsume): Promise<void> {
    const n = waiters.length;
    let counted: RateLimiterRes;
    let rejected = false;
    try {
      counted = await this.limiter(bucket, perMinute).consume(owner, n);
    } catch (rej) {
      if (!(rej instanceof RateLimiterRes)) {
        for (const w of waiters) w.reject(rej);
        return;
      }
      counted = rej;
      rejected = true;
    }
    waiters.forEach((w, i) => w.resolve(splitDecision(counted, rejected, n, i, perMinute)));
  }
}

interface PendingConsume {
  bucket: RateBucket;
  owner: string;
  perMinute: number;
  waiters: { resolve(d: RateDecision): void; reject(err: unknown): void }[];
}

/**
 * The decision for the `i`-th (from 0) of `n` calls counted together, whose
 * points brought the key's count to `res.consumedPoints`: that call's own
 * point is number `consumedPoints - n + i + 1`, allowed while within
 * `perMinute`. A refusal that counted nothing (a key already blocked in
 * memory for the rest of its window reports 0 consumed points) refuses all.
 */
export function splitDecision(
  res: RateLimiterRes,
  rejected: boolean,
  n: number,
  i: number,
  perMinute: number,
): RateDecision {
  const counted = res.consumedPoints >= n;
  const point = res.consumedPoints - n + i + 1;
  if (!rejected || (counted && point <= perMinute)) {
    return { allowed: true, retryAfterMs: 0, remaining: Math.max(perMinute - point, 0), limit: perMinute };
  }
  return { allowed: false, retryAfterMs: Math.max(1, res.msBeforeNext), remaining: 0, limit: perMinute };
}
