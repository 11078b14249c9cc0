import { MemoryLimits } from './memory.js';
import { RedisLimits } from './redis.js';
import type { LimitsDriver } from './types.js';

export * from './types.js';
export { MemoryLimits, RedisLimits };

/** Redis when a URL is configured (shared by every instance), memory otherwise. */
export function createLimits(redisUrl: string | undefined, prefix = 'stt:'): LimitsDriver {
  return redisUrl ? RedisLimits.connect(redisUrl, prefix) : new MemoryLimits();
}
