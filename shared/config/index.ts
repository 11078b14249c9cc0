/**
 * The one config module: every setting of every process is read from the
 * environment here (through the section readers beside this file), with the
 * defaults documented in README.md ("Configuration"). Nothing else reads
 * process.env. Internal tuning is not read from the environment: it is the
 * named constants of the section modules, and a test or an embedding process
 * changes it through `overrides`.
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

/** Any part of a Config, at any depth (arrays are replaced whole). */
export type ConfigOverrides = DeepPartial<Config>;
type DeepPartial<T> = T extends readonly unknown[]
  ? T
  : T extends object
    ? { [K in keyof T]?: DeepPartial<T[K]> }
    : T;

/**
 * The settings of a process: `env` read by the section readers, then
 * `overrides` laid over the result (tests shorten internal timings this way;
 * the embedded start points the API at its realtime process).
 */
export function loadConfig(env: Env = process.env, overrides: ConfigOverrides = {}): Config {
  const platform = platformConfig(env);
  const realtime = realtimeConfig(env);
  const config = merge<Config>(
    {
      ...platform,
      speech: speechConfig(env),
      realtime,
      batch: batchConfig(env),
      ledger: usageLedgerConfig(env, platform.dataDir, realtime.leaseTtlMs),
    },
    overrides,
  );
  // Without REALTIME_READY_URLS, the API's /readyz checks the realtime process it proxies to, if any.
  const rt = config.realtime;
  if (!rt.readyUrls.length && rt.upstreamProxyTarget)
    rt.readyUrls = [`http://${rt.upstreamProxyTarget}/readyz`];
  return config;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return (
    typeof v === 'object' && v !== null && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype
  );
}

/** A copy of `base` with `over` laid over it: plain objects merged key by key, anything else replaced. */
function merge<T>(base: T, over: DeepPartial<T> | undefined): T {
  if (!isPlainObject(base) || !isPlainObject(over)) return (over === undefined ? base : over) as T;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) if (v !== undefined) out[k] = merge(out[k], v);
  return out as T;
}

/**
 * The names of the settings a config reader (by default all of a service's)
 * looks up, recorded from a run over an empty environment (a setting read
 * only when another is set is not among them).
 */
export function settingNames(read: (env: Env) => unknown = loadConfig): Set<string> {
  const seen = new Set<string>();
  const recorder: Env = new Proxy(
    {},
    {
      get(_target, key) {
        if (typeof key === 'string') seen.add(key);
        return undefined;
      },
    },
  );
  read(recorder);
  return seen;
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
