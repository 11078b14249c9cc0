import { Redis } from 'ioredis';
import type { LeaseRequest, LimitsDriver, RateBucket, RateDecision } from './types.js';
import { RateLimiters } from './rate.js';

/*
 * Leases are members of a sorted set per (scope, owner), scored by expiry in
 * Redis server time (so instance clocks do not matter). Expired members are
 * dropped before every count, which is what frees the slots of a dead instance.
 */
/*
 * One owner's leases are taken and renewed in one call for all of them
 * (ARGV: the settings, then the lease ids), so an instance's upkeep costs a
 * call per owner and renewal interval, however many sessions it holds. Both
 * answer the ids they could not take or renew.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local refused = {}
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) or redis.call('ZCARD', KEYS[1]) < max then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
  else
    refused[#refused + 1] = ARGV[i]
  end
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return refused`;

const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) > now then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
if redis.call('PTTL', KEYS[1]) < ttl * 2 then redis.call('PEXPIRE', KEYS[1], ttl * 2) end
return lost`;

const COUNT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])`;

/**
 * How long one Redis command may take before it fails: a frozen Redis
 * (SIGSTOP, `CLIENT PAUSE`, a stalled network) keeps its connection open, so
 * without a bound every request would wait for the whole freeze. Rates then
 * fall back to the instance's own count; lease calls are refused.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 1000;
/** How often the driver checks Redis by itself, so a blip is seen even by an idle instance. */
export const REDIS_HEARTBEAT_MS = 500;
/** Longest wait between reconnection attempts while Redis is away: a restarted Redis is seen within this. */
export const REDIS_RECONNECT_MAX_MS = 200;

export class RedisLimits implements LimitsDriver {
  readonly kind = 'redis' as const;
  private readonly rates: RateLimiters;
  /** When the last trouble ended: the first call that succeeded after it. */
  private steadySince = -Infinity;
  /** Set by trouble; the first call that succeeds after it tells the recovery listeners. */
  private troubled = false;
  private readonly recovered = new Set<() => void>();
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(
    readonly redis: Redis,
    private readonly prefix = 'stt:',
    private readonly ownsClient = false,
  ) {
    this.rates = new RateLimiters(redis, prefix);
    // A dropped connection (a restarted Redis has lost every lease) counts as trouble.
    for (const event of ['close', 'reconnecting', 'end']) redis.on(event, this.trouble);
    // Reconnected: ask at once, so recovery is seen now rather than at the next heartbeat.
    redis.on('ready', () => void this.ping());
  }

  static connect(url: string, prefix = 'stt:'): RedisLimits {
    // Auto-pipelining batches the commands of concurrent requests into one write per tick.
    const redis = new Redis(url, {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: true,
      connectTimeout: 2000,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
      // Reconnect within REDIS_RECONNECT_MAX_MS of Redis coming back (ioredis's default backs off to 2 s).
      retryStrategy: (times: number) => Math.min(times * 50, REDIS_RECONNECT_MAX_MS),
      enableAutoPipelining: true,
    });
    // Connection errors are reported by the commands that fail; avoid unhandled 'error' events.
    redis.on('error', () => {});
    const limits = new RedisLimits(redis, prefix, true);
    limits.heartbeat = setInterval(() => void limits.ping(), REDIS_HEARTBEAT_MS);
    limits.heartbeat.unref();
    return limits;
  }

  private readonly trouble = () => {
    this.troubled = true;
  };

  /** Runs a store call, noting a failure as trouble and the first success after trouble as recovery. */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    let result: T;
    try {
      result = await fn();
    } catch (err) {
      this.trouble();
      throw err;
    }
    if (this.troubled) {
      this.troubled = false;
      this.steadySince = performance.now();
      for (const cb of this.recovered) cb();
    }
    return result;
  }

  onRecovered(cb: () => void): () => void {
    this.recovered.add(cb);
    return () => this.recovered.delete(cb);
  }

  /**
   * 0 while in trouble; then the time since the first call that succeeded after it. Counted from
   * the recovery, not from the last failure: during a freeze a command fails only once per
   * command timeout (auto-pipelining sends the next batch when the previous one fails), so the
   * last failure can be a second before Redis returns, and counting from it shortened the
   * settle period by up to that much.
   */
  steadyForMs(): number {
    return this.troubled ? 0 : performance.now() - this.steadySince;
  }

  private leaseKey(scope: string, owner: string): string {
    return `${this.prefix}lease:${scope}:${owner}`;
  }

  consume(bucket: RateBucket, owner: string, perMinute: number): Promise<RateDecision> {
    return this.rates.consume(bucket, owner, perMinute);
  }

  async acquireLease(req: LeaseRequest): Promise<boolean> {
    return (await this.acquireLeases(req, [req.leaseId])).length === 0;
  }

  async acquireLeases(req: Omit<LeaseRequest, 'leaseId'>, leaseIds: string[]): Promise<string[]> {
    if (leaseIds.length === 0) return [];
    const key = this.leaseKey(req.scope, req.owner);
    return (await this.call(() =>
      this.redis.eval(ACQUIRE, 1, key, req.max, req.ttlMs, ...leaseIds),
    )) as string[];
  }

  async renewLease(scope: string, owner: string, leaseId: string, ttlMs: number): Promise<boolean> {
    return (await this.renewLeases(scope, owner, [leaseId], ttlMs)).length === 0;
  }

  async renewLeases(scope: string, owner: string, leaseIds: string[], ttlMs: number): Promise<string[]> {
    if (leaseIds.length === 0) return [];
    const key = this.leaseKey(scope, owner);
    return (await this.call(() => this.redis.eval(RENEW, 1, key, ttlMs, ...leaseIds))) as string[];
  }

  async releaseLease(scope: string, owner: string, leaseId: string): Promise<void> {
    await this.call(() => this.redis.zrem(this.leaseKey(scope, owner), leaseId));
  }

  async countLeases(scope: string, owner: string): Promise<number> {
    return Number(await this.call(() => this.redis.eval(COUNT, 1, this.leaseKey(scope, owner))));
  }

  async ping(): Promise<boolean> {
    try {
      const pong = await this.call(() => this.redis.ping());
      if (pong === 'PONG') return true;
      this.trouble();
      return false;
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    clearInterval(this.heartbeat);
    if (this.ownsClient) this.redis.disconnect();
    return Promise.resolve();
  }
}
