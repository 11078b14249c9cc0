/**
 * `npm run migrate`: apply pending knex migrations to DATABASE_URL (under the advisory lock).
 * A database that does not answer yet (starting, or its container not up: podman-compose 1.0
 * starts services without waiting for their dependencies' health) is waited for, polling every
 * 2 s, for up to 10 min; other errors fail at once.
 * `--wait`: apply nothing; wait until the database has every migration of this build (a
 * Kubernetes initContainer while the migration Job runs), polling every 2 s, exit 1 after 10 min.
 */
import { loadConfig } from '../shared/config/index.js';
import { createDb, migrateLatest, migrationConfig } from '../shared/db/index.js';
import { createLogger } from '../shared/logger.js';

const WAIT_POLL_MS = 2000;
const WAIT_LIMIT_MS = 10 * 60_000;
/** Errors of a database that is not up yet (connection refused or reset, name not resolvable, starting up). */
const NOT_UP = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', '57P03']);

const config = loadConfig();
const logger = createLogger({ level: config.logLevel, name: 'migrate' });
if (!config.databaseUrl) {
  logger.error('DATABASE_URL is not set');
  process.exit(2);
}
const db = createDb(config.databaseUrl, { logger, queryTimeoutMs: 0 });
try {
  if (process.argv.includes('--wait')) {
    const deadline = Date.now() + WAIT_LIMIT_MS;
    for (;;) {
      const pending = await db.migrate
        .list(migrationConfig())
        .then(([, todo]) => (todo as unknown[]).length)
        .catch((err: Error) => err.message);
      if (pending === 0) break;
      if (Date.now() > deadline) {
        logger.error({ pending }, 'migrations still pending: is the migration job running?');
        process.exitCode = 1;
        break;
      }
      logger.info({ pending }, 'waiting for the migrations');
      await new Promise((r) => setTimeout(r, WAIT_POLL_MS));
    }
    if (!process.exitCode) logger.info('database up to date');
  } else {
    const deadline = Date.now() + WAIT_LIMIT_MS;
    for (;;) {
      const err = await db.raw('SELECT 1').then(
        () => undefined,
        (e: Error & { code?: string }) => e,
      );
      if (!err) break;
      if (!NOT_UP.has(err.code ?? '') || Date.now() > deadline) throw err;
      logger.info({ code: err.code }, 'waiting for the database');
      await new Promise((r) => setTimeout(r, WAIT_POLL_MS));
    }
    const applied = await migrateLatest(db);
    logger.info({ applied }, applied.length ? 'migrations applied' : 'database already up to date');
  }
} finally {
  await db.destroy();
}
