/**
 * A real API instance for tests: its own database, real Postgres, optionally
 * real Redis, the full app, and a captured log stream to assert on.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import type Koa from 'koa';
import { loadConfig, type Config, type ConfigOverrides } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { createApp } from '../../api/app.js';
import { type AppDeps, closeDeps, createDeps, type DepsOptions } from '../../api/deps.js';
import { createTestDatabase, type TestDatabase } from './db.js';

export const ADMIN_TOKEN = 'test-admin-token-' + randomBytes(8).toString('hex');
export const SESSION_SECRET = 'test-session-secret-' + randomBytes(8).toString('hex');

export class LogCapture extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _enc: string, cb: () => void): void {
    this.lines.push(...chunk.toString().split('\n').filter(Boolean));
    cb();
  }
  get text(): string {
    return this.lines.join('\n');
  }
}

export interface TestApp {
  app: Koa;
  /** For supertest: request(ctx.server) */
  server: ReturnType<Koa['callback']>;
  deps: AppDeps;
  config: Config;
  db: TestDatabase;
  logs: LogCapture;
  close(): Promise<void>;
}

/**
 * Builds the app through the API's composition root (api/deps.ts), as the
 * process does. `env` is what an operator sets; `opts.overrides` changes
 * internal tuning (named constants in shared/config), e.g.
 * `{ auth: { keyCacheTtlMs: 0 } }`; `opts.deps` passes the root's test options
 * (artifact store, runner hooks, extra readiness checks).
 */
export async function createTestApp(
  env: Record<string, string | undefined> = {},
  opts: { db?: TestDatabase; overrides?: ConfigOverrides; deps?: DepsOptions } = {},
): Promise<TestApp> {
  const db = opts.db ?? (await createTestDatabase());
  const config = loadConfig(
    {
      GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
      GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
      LOG_LEVEL: 'info',
      DATA_DIR: 'test/.tmp/data',
      ...env,
      DATABASE_URL: db.url,
    },
    opts.overrides,
  );
  const logs = new LogCapture();
  const logger = createLogger({ level: config.logLevel }, logs);
  const deps = createDeps(config, logger, opts.deps);
  const app = createApp(deps);
  return {
    app,
    server: app.callback(),
    deps,
    config,
    db,
    logs,
    async close() {
      await closeDeps(deps);
      if (!opts.db) await db.drop();
    },
  };
}

/** Issues a key through the admin API's own code path and returns its plaintext and id. */
export async function issueKey(
  t: TestApp,
  input: { ownerId?: string; plan?: string; expiresAt?: Date } = {},
): Promise<{ key: string; id: string }> {
  const rec = await t.deps.keys.issue({
    ownerId: input.ownerId ?? 'tenant-a',
    plan: input.plan ?? 'free',
    expiresAt: input.expiresAt,
  });
  return { key: rec.key!, id: rec.id };
}
