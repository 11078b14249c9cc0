/**
 * Realtime process entry: `tsx realtime/main.ts`. Same configuration as the
 * API (DATABASE_URL, REDIS_URL, STT_WORKER_URLS, ...) plus REALTIME_* settings.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfig, type Config } from '../shared/config/index.js';
import { createLogger, type Logger } from '../shared/logger.js';
import { createDb, migrateLatest } from '../shared/db/index.js';
import { createAuthentication } from '../shared/auth/index.js';
import { createLimits } from '../shared/limits/index.js';
import { createSpeechEngine } from '../shared/stt/index.js';
import { UsageLedger } from '../shared/usage.js';
import { startRealtime, type RealtimeDeps, type RunningRealtime } from './server.js';
import { NativeUwsUnavailable } from './uws.js';
import { installFailurePolicy } from '../shared/process/index.js';

/** Database, auth, limits and speech engine of a realtime process, from the config. */
export async function createRealtimeDeps(
  config: Config,
  logger: Logger,
): Promise<RealtimeDeps & { close(): Promise<void> }> {
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required for the realtime process');
  const db = createDb(config.databaseUrl, { poolMax: config.dbPoolMax, logger });
  if (config.migrateOnStart) await migrateLatest(db);
  const { auth } = createAuthentication(config, db, logger);
  const limits = createLimits(config.redisUrl);
  const ledger = new UsageLedger(db, config.ledger, logger).start();
  const engine = createSpeechEngine(config, logger);
  return {
    config,
    logger,
    db,
    auth,
    limits,
    engine,
    ledger,
    async close() {
      await ledger.close().catch(() => {});
      await auth.close().catch(() => {});
      await limits.close().catch(() => {});
      await engine.close().catch(() => {});
      await db.destroy().catch(() => {});
    },
  };
}

export async function runRealtimeProcess(config: Config = loadConfig()): Promise<RunningRealtime> {
  const logger = createLogger({ level: config.logLevel, name: 'realtime' });
  const started: { stop?: () => Promise<void> } = {};
  installFailurePolicy(logger, { onFatal: () => started.stop?.() });
  const deps = await createRealtimeDeps(config, logger);
  const running = await startRealtime(deps);
  started.stop = () => running.stop();

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void (async () => {
      await running.stop();
      await deps.close();
      process.exit(0);
    })();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, stop);
  // Forked by a parent (the embedded start): when the parent goes away, so do we.
  if (process.send) process.on('disconnect', stop);
  // Tell a parent (tests, supervisors) where we listen.
  process.send?.({ type: 'realtime.listening', port: running.port });
  return running;
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

if (isEntry) {
  runRealtimeProcess().catch((err) => {
    console.error(err instanceof NativeUwsUnavailable ? `realtime: ${err.message}` : err);
    process.exit(1);
  });
}
