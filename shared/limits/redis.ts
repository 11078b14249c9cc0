import { Redis } from 'ioredis';
import type { LeaseRequest, LimitsDriver, RateBucket, RateDecision } from './types.js';
import { RateLimiters } from './rate.js';

/*
 * Leases are members of a sorted set per (scope, owner), scored by expiry in
 * Redis server time (so instance clocks do not matter). Expired members are
 * dropped before every count, which is what frees the slots of a dead instance.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ttl = tonumber(ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
  return 1
end
return 0`;

const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl * 2 then redis.call('PEXPIRE', KEYS[1], ttl * 2) end
return 1`;

const COUNT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])`;

export class RedisLimits implements LimitsDriver {
  readonly kind = 'redis' as const;
  private readonly rates: RateLimiters;

  constructor(
    readonly redis: Redis,
    private readonly prefix = 'stt:',
    private readonly ownsClient = false,
  ) {
    this.rates = new RateLimiters(redis, prefix);
  }

  static connect(url: string, prefix = 'stt:'): RedisLimits {
    // Auto-pipelining batches the commands of concurrent requests into one write per tick.
    const redis = new Redis(url, {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: true,
      connectTimeout: 2000,
      enableAutoPipelining: true,
    });
    // Connection errors are reported by the commands that fail; avoid unhandled 'error' events.
    redis.on('error', () => {});
    return new RedisLimits(redis, prefix, true);
  }

  private leaseKey(scope: string, owner: string): string {
    return `${this.prefix}lease:${scope}:${owner}`;
  }

  consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    return this.rates.consume(bucket, owner, perMinute);
  }

  async acquireLease(req: LeaseRequest): Promise<boolean> {
    const r = await this.redis.eval(
      ACQUIRE,
      1,
      this.leaseKey(req.scope, req.owner),
      req.leaseId,
      req.max,
      req.ttlMs,
    );
    return r === 1;
  }

  async renewLease(scope: string, owner: string, leaseId: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.eval(RENEW, 1, this.leaseKey(scope, owner), leaseId, ttlMs)) === 1;
  }

  async releaseLease(scope: string, owner: string, leaseId: string): Promise<void> {
    await this.redis.zrem(this.leaseKey(scope, owner), leaseId);
  }

  async countLeases(scope: string, owner: string): Promise<number> {
    return Number(await this.redis.eval(COUNT, 1, this.leaseKey(scope, owner)));
  }

  async ping(): Promise<boolean> {
    try {
      const pong = await Promise.race([
        this.redis.ping(),
        new Promise((r) => setTimeout(r, 1000, 'timeout').unref()),
      ]);
      return pong === 'PONG';
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    if (this.ownsClient) this.redis.disconnect();
    return Promise.resolve();
  }
}
