/**
 * A real API instance (the full app, segment route included) for the speech tests: its own
 * migrated database (test/helpers/db.ts), the full app, listening on a
 * loopback port so the official openai SDK can reach it.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig, type Config, type ConfigOverrides } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { createApp } from '../../api/app.js';
import { type AppDeps, closeDeps, createDeps } from '../../api/deps.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

export interface SpeechTestApp {
  url: string;
  server: http.Server;
  deps: AppDeps;
  config: Config;
  db: TestDatabase;
  issueKey(plan?: string): Promise<{ key: string; id: string }>;
  close(): Promise<void>;
}

export async function startSpeechApp(
  env: Record<string, string> = {},
  opts: { db?: TestDatabase; overrides?: ConfigOverrides } = {},
): Promise<SpeechTestApp> {
  const db = opts.db ?? (await createTestDatabase('stt_speech'));
  const config = loadConfig(
    {
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
      DATA_DIR: 'test/.tmp/data',
      ...env,
      DATABASE_URL: db.url,
    },
    opts.overrides,
  );
  const logger = createLogger({ level: config.logLevel });
  const deps = createDeps(config, logger);
  const app = createApp(deps);
  const server = http.createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    deps,
    config,
    db,
    async issueKey(plan = 'pro') {
      const rec = await deps.keys.issue({ ownerId: 'speech-tests', plan });
      return { key: rec.key!, id: rec.id };
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await closeDeps(deps);
      if (!opts.db) await db.drop();
    },
  };
}
