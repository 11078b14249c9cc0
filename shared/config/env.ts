/**
 * Typed readers over an environment map. Every setting of the service is read
 * through these, from the config modules in this folder only.
 */
export type Env = Record<string, string | undefined>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function str(env: Env, name: string, fallback: string): string;
export function str(env: Env, name: string): string | undefined;
export function str(env: Env, name: string, fallback?: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? fallback : v;
}

export function int(
  env: Env,
  name: string,
  fallback: number,
  min = Number.MIN_SAFE_INTEGER,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `between ${min} and ${max}`;
    throw new ConfigError(`${name} must be an integer ${range}, got "${v}"`);
  }
  return n;
}

export function num(env: Env, name: string, fallback: number, min = -Infinity): number {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n < min) throw new ConfigError(`${name} must be a number >= ${min}, got "${v}"`);
  return n;
}

export function bool(env: Env, name: string, fallback: boolean): boolean {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  if (/^(1|true|yes|on)$/i.test(v)) return true;
  if (/^(0|false|no|off)$/i.test(v)) return false;
  throw new ConfigError(`${name} must be a boolean (true/false), got "${v}"`);
}

export function list(env: Env, name: string): string[] {
  const v = env[name];
  if (!v) return [];
  return v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

export function json<T>(env: Env, name: string, fallback: T): T {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  try {
    return JSON.parse(v) as T;
  } catch {
    throw new ConfigError(`${name} must be valid JSON`);
  }
}
