import {
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import type { Redis } from 'ioredis';
import type { RateBucket, RateDecision } from './types.js';

export interface ReservationPolicy {
  /** Share of a per-minute limit one instance may take from Redis at once (0 = always one point). */
  fraction: number;
  /** Size of a reservation, in points, unless the key spends it faster than `spanMs`. */
  max: number;
  /** A key that spends its reservation faster than this gets the next one doubled (up to `fraction` of its limit). */
  spanMs: number;
}

/** Points taken from Redis ahead of use, spent locally until the window ends. */
interface Reservation {
  tokens: number;
  /** When the Redis window that granted them ends (ms since epoch). */
  until: number;
  /** Points left in Redis after the last reservation. */
  remaining: number;
  pending?: Promise<void>;
  /** Size the next reservation aims at (grows for a key that spends quickly, shrinks back when it slows). */
  size?: number;
  /** When the last reservation was granted (ms since epoch). */
  grantedAt?: number;
}

/**
 * One rate-limiter-flexible limiter per (bucket, size), created on first use:
 * plans differ in their per-minute sizes, and a limiter's size is fixed.
 *
 * With Redis, a busy key does not cost a Redis round trip per request: an
 * instance reserves a small share of the key's limit at once (`max` points,
 * never more than `fraction` of the limit) and spends it locally until the
 * window ends. A key that spends its reservation in less than `spanMs` gets
 * the next one doubled, up to `fraction` of its limit, and one that slows
 * down gets smaller ones again, so even a very busy key costs an instance
 * about ten Redis calls a second. Reserved points are counted in Redis when
 * they are taken, so the instances together never admit more than the limit;
 * the price is that near the limit one instance may refuse while another
 * still holds unspent points (at most `fraction` of the limit each). Small
 * limits (the free plan's 12 per minute) reserve one point at a time, which
 * is exact.
 */
export class RateLimiters {
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  /** Reservations by bucket, then limit, then owner: no key string is built per request. */
  private readonly reservations = new Map<RateBucket, Map<number, Map<string, Reservation>>>();

  constructor(
    private readonly redis: Redis | null,
    private readonly prefix: string,
    private readonly policy: ReservationPolicy = { fraction: 0.01, max: 100, spanMs: 100 },
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

  async consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    return this.consumeNow(bucket, owner, perMinute);
  }

  /**
   * `consume`, answered without waiting when this instance can decide alone
   * (a point of its reservation is left): the decision itself, else a promise.
   * That is almost every request of a busy key, so the HTTP middleware uses it.
   */
  consumeNow(bucket: RateBucket, owner: string, perMinute: number): RateDecision | Promise<RateDecision> {
    if (perMinute <= 0) return { allowed: false, retryAfterMs: 60_000, remaining: 0, limit: 0 };
    const cap = Math.floor(perMinute * this.policy.fraction);
    if (!this.redis || Math.min(this.policy.max, cap) <= 1) return this.take(bucket, owner, perMinute, 1);
    const byOwner = this.reservationsOf(bucket, perMinute);
    const r = byOwner.get(owner);
    if (r && r.tokens > 0 && Date.now() < r.until) {
      r.tokens--;
      return { allowed: true, retryAfterMs: 0, remaining: r.remaining + r.tokens, limit: perMinute };
    }
    return this.reserve(bucket, owner, perMinute, cap, byOwner);
  }

  /** The size a key's next reservation aims at: doubled while it spends them within `spanMs`, halved when it slows down. */
  private nextSize(r: Reservation | undefined, cap: number, now: number): number {
    const base = Math.min(this.policy.max, cap);
    const last = r?.size ?? base;
    if (r?.grantedAt === undefined) return last;
    const lasted = now - r.grantedAt;
    if (lasted < this.policy.spanMs) return Math.min(cap, last * 2);
    if (lasted > 4 * this.policy.spanMs) return Math.max(base, Math.floor(last / 2));
    return last;
  }

  private reservationsOf(bucket: RateBucket, perMinute: number): Map<string, Reservation> {
    let bySize = this.reservations.get(bucket);
    if (!bySize) this.reservations.set(bucket, (bySize = new Map()));
    let byOwner = bySize.get(perMinute);
    if (!byOwner) bySize.set(perMinute, (byOwner = new Map()));
    return byOwner;
  }

  private async reserve(
    bucket: RateBucket,
    owner: string,
    perMinute: number,
    cap: number,
    byOwner: Map<string, Reservation>,
  ): Promise<RateDecision> {
    for (;;) {
      const r = byOwner.get(owner);
      const now = Date.now();
      if (r && now < r.until && r.tokens > 0) {
        r.tokens--;
        return { allowed: true, retryAfterMs: 0, remaining: r.remaining + r.tokens, limit: perMinute };
      }
      // One reservation in flight per key; the others wait for it and spend from it.
      if (r?.pending) {
        await r.pending;
        continue;
      }
      // The first request of a window learns what is left before reserving more than one point.
      const target = this.nextSize(r, cap, now);
      const size = r && now < r.until ? Math.max(1, Math.min(target, r.remaining)) : 1;
      const entry: Reservation =
        r && now < r.until ? r : { tokens: 0, until: 0, remaining: 0, size: r?.size };
      let decision!: RateDecision & { points?: number; windowMs?: number };
      entry.pending = (async () => {
        decision = await this.take(bucket, owner, perMinute, size);
        if (!decision.allowed && size > 1) decision = await this.take(bucket, owner, perMinute, 1);
        if (decision.allowed) {
          const granted = decision.points ?? 1;
          entry.tokens = granted - 1;
          entry.until = Date.now() + decision.windowMs!;
          entry.remaining = decision.remaining;
          if (granted > 1) {
            entry.size = target;
            entry.grantedAt = Date.now();
          }
        }
      })();
      byOwner.set(owner, entry);
      try {
        await entry.pending;
      } finally {
        entry.pending = undefined;
      }
      if (byOwner.size > 100_000) evictExpired(byOwner);
      return {
        allowed: decision.allowed,
        retryAfterMs: decision.retryAfterMs,
        remaining: decision.remaining + entry.tokens,
        limit: perMinute,
      };
    }
  }

  private async take(
    bucket: RateBucket,
    owner: string,
    perMinute: number,
    points: number,
  ): Promise<RateDecision & { points?: number; windowMs?: number }> {
    try {
      const res = await this.limiter(bucket, perMinute).consume(owner, points);
      return {
        allowed: true,
        retryAfterMs: 0,
        remaining: res.remainingPoints,
        limit: perMinute,
        points,
        windowMs: res.msBeforeNext,
      };
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

function evictExpired(byOwner: Map<string, Reservation>): void {
  const now = Date.now();
  for (const [k, r] of byOwner) if (now >= r.until && !r.pending) byOwner.delete(k);
}
