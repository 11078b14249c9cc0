/**
 * Child process that owns the embedded Postgres server. It runs in its own
 * process group (spawned detached), so a Ctrl-C in the terminal reaches only
 * the service, which drains its requests and flushes its buffers before it
 * asks this process to stop Postgres. If the parent dies, the IPC channel
 * closes and Postgres is stopped too.
 *
 * It also keeps Postgres up: a probe every second; after two failed probes
 * in a row (the server died or hangs) a new server is started on the same
 * data directory, with backoff (EMBEDDED_RESTART_BASE_MS doubling to
 * EMBEDDED_RESTART_MAX_MS, constants in shared/config/platform.ts). The service's pools reconnect by themselves.
 */
import pg from 'pg';
import { createLogger } from '../../shared/logger.js';
import { Backoff } from '../../shared/process/restart.js';
import { installFailurePolicy } from '../../shared/process/index.js';
import { startEmbeddedPostgres, stopOrphanedPostgres } from './postgres.js';

const [dataDir, port, level, restartBaseMs, restartMaxMs] = process.argv.slice(2);
const password = process.env.EMBEDDED_PG_PASSWORD ?? '';
const logger = createLogger({ level: level ?? 'info', name: 'embedded-postgres' });
installFailurePolicy(logger);
const backoff = new Backoff({
  baseMs: Number(restartBaseMs) || 500,
  maxMs: Number(restartMaxMs) || 30_000,
});

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => {});

async function alive(): Promise<boolean> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port: Number(port),
    user: 'postgres',
    password,
    database: 'postgres',
    connectionTimeoutMillis: 3000,
    query_timeout: 3000,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

try {
  // A server left running by a supervisor that was killed holds the data directory: stop it first.
  await stopOrphanedPostgres(dataDir, logger);
  let server = await startEmbeddedPostgres(dataDir, Number(port), password, logger);
  backoff.started();
  let stopping = false;
  let failures = 0;
  let restarting = false;
  const restart = async () => {
    restarting = true;
    while (!stopping) {
      const waitMs = backoff.next();
      logger.error({ nextInMs: waitMs }, 'embedded Postgres is not answering; restarting it');
      await new Promise((r) => setTimeout(r, waitMs));
      if (stopping) break;
      try {
        // The old server is gone or hung: make sure it has let go of the data directory.
        await stopOrphanedPostgres(dataDir, logger);
        server = await startEmbeddedPostgres(dataDir, Number(port), password, logger);
        backoff.started();
        logger.info('embedded Postgres restarted');
        process.send?.({ type: 'postgres.restarted' });
        break;
      } catch (err) {
        logger.error({ err }, 'embedded Postgres did not restart');
      }
    }
    failures = 0;
    restarting = false;
  };
  const watch = setInterval(() => {
    if (stopping || restarting) return;
    void alive().then((ok) => {
      failures = ok ? 0 : failures + 1;
      if (failures >= 2 && !restarting && !stopping) void restart();
    });
  }, 1000);
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    clearInterval(watch);
    // stop() waits for the server's exit; a server that already died never sends one.
    await Promise.race([server.stop().catch(() => {}), new Promise((r) => setTimeout(r, 15_000))]);
    await stopOrphanedPostgres(dataDir, logger).catch(() => {});
    process.exit(0);
  };
  process.on('message', (m) => {
    if (m === 'stop') void stop();
  });
  process.on('disconnect', () => void stop());
  process.send!({ ready: true, url: server.url });
} catch (err) {
  logger.error({ err }, 'embedded Postgres failed to start');
  process.send?.({ ready: false, error: (err as Error)?.message ?? String(err) });
  process.exit(1);
}
