/**
 * Realtime process entry: `tsx realtime/main.ts`. Same configuration as the
 * API (DATABASE_URL, REDIS_URL, STT_WORKER_URLS, ...) plus REALTIME_* settings.
 * A declaration on the process shell (shared/process/runner.ts) and the
 * platform kernel (shared/platform.ts).
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Config } from '../shared/config/index.js';
import type { Logger } from '../shared/logger.js';
import { migrateIfConfigured } from '../shared/db/index.js';
import { assertKeyPlansKnown, createPlatform } from '../shared/platform.js';
import { runProcess } from '../shared/process/runner.js';
import { startRealtime, type RealtimeDeps, type RunningRealtime } from './server.js';
import { NativeUwsUnavailable } from './uws.js';

/** Database, auth, limits, ledger and speech engine of a realtime process: the platform, as it is. */
export async function createRealtimeDeps(
  config: Config,
  logger: Logger,
): Promise<RealtimeDeps & { close(): Promise<void> }> {
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required for the realtime process');
  // Sessions decode with the streaming form; the clip form is its fallback, started when first needed.
  const speech = config.speech.builtin.streaming
    ? { ...config.speech, builtin: { ...config.speech.builtin, clipOnDemand: true } }
    : config.speech;
  const platform = createPlatform({ ...config, speech }, logger);
  await migrateIfConfigured(platform);
  await assertKeyPlansKnown(platform).catch(async (err: unknown) => {
    await platform.close();
    throw err;
  });
  return { ...platform, engine: platform.speech, close: () => platform.close() };
}

/** Starts the realtime tier on the platform; its stop drains the sessions, then closes the platform. */
export async function startRealtimeRole(config: Config, logger: Logger): Promise<RunningRealtime> {
  const deps = await createRealtimeDeps(config, logger);
  const running = await startRealtime(deps).catch(async (err: unknown) => {
    await deps.close();
    throw err;
  });
  // Tell a parent (tests, the embedded start) where we listen.
  process.send?.({ type: 'realtime.listening', port: running.port });
  return {
    ...running,
    async stop() {
      await running.stop();
      await deps.close();
    },
  };
}

const isEntry = (() => {
  try {
    return (
      !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))
    );
  } catch {
    return false;
  }
})();

/** The realtime process: the role on the process shell (signals, failure policy, ordered stop). */
export function runRealtimeProcess(config?: Config): Promise<RunningRealtime> {
  return runProcess({
    name: 'realtime',
    config,
    start: ({ config: c, logger }) => startRealtimeRole(c, logger),
    describeStartError: (err) => (err instanceof NativeUwsUnavailable ? `realtime: ${err.message}` : err),
  });
}

if (isEntry) await runRealtimeProcess().catch(() => undefined);
