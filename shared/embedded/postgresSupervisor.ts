/**
 * Child process that owns the embedded Postgres server. It runs in its own
 * process group (spawned detached), so a Ctrl-C in the terminal reaches only
 * the service, which drains its requests and flushes its buffers before it
 * asks this process to stop Postgres. If the parent dies, the IPC channel
 * closes and Postgres is stopped too.
 */
import { createLogger } from '../logger.js';
import { startEmbeddedPostgres } from './postgres.js';

const [dataDir, port, level] = process.argv.slice(2);
const password = process.env.EMBEDDED_PG_PASSWORD ?? '';
const logger = createLogger({ level: level ?? 'info', name: 'embedded-postgres' });

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => {});

try {
  const pg = await startEmbeddedPostgres(dataDir!, Number(port), password, logger);
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await pg.stop().catch(() => {});
    process.exit(0);
  };
  process.on('message', (m) => {
    if (m === 'stop') void stop();
  });
  process.on('disconnect', () => void stop());
  process.send!({ ready: true, url: pg.url });
} catch (err) {
  logger.error({ err }, 'embedded Postgres failed to start');
  process.send?.({ ready: false, error: (err as Error)?.message ?? String(err) });
  process.exit(1);
}
