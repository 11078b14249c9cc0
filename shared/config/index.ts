/**
 * The one config module: every setting of every process is read from the
 * environment here (through the section readers beside this file), with the
 * defaults documented in README.md. Nothing else reads process.env.
 */
import { type Env } from './env.js';
import { platformConfig, type PlatformConfig } from './platform.js';
import { speechConfig, type SpeechConfig } from './speech.js';
import { realtimeConfig, type RealtimeConfig } from './realtime.js';
import { batchConfig, type BatchConfig } from './batch.js';
import { usageLedgerConfig, type UsageLedgerConfig } from './usage.js';

export { ConfigError } from './env.js';
export type { Env };

export interface Config extends PlatformConfig {
  speech: SpeechConfig;
  realtime: RealtimeConfig;
  batch: BatchConfig;
  ledger: UsageLedgerConfig;
}

export function loadConfig(env: Env = process.env): Config {
  const platform = platformConfig(env);
  return {
    ...platform,
    speech: speechConfig(env),
    realtime: realtimeConfig(env),
    batch: batchConfig(env),
    ledger: usageLedgerConfig(env, platform.dataDir),
  };
}

/** Names of settings whose values must never be printed or logged. */
export const SECRET_SETTINGS = [
  'GATEWAY_ADMIN_TOKEN',
  'GATEWAY_SESSION_TOKEN_SECRET',
  'DATABASE_URL',
  'REDIS_URL',
  'S3_SECRET_ACCESS_KEY',
  'STT_WORKER_API_KEY',
  'REVIEW_API_KEY',
  'WEBHOOK_SECRET',
  'ENGINE_API_KEY',
  'STT_API_KEY',
];
