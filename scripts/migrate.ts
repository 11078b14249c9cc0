/** `npm run migrate`: apply pending knex migrations to DATABASE_URL (under the advisory lock). */
import { loadConfig } from '../shared/config/index.js';
import { createDb, migrateLatest } from '../shared/db/index.js';
import { createLogger } from '../shared/logger.js';

const config = loadConfig();
const logger = createLogger({ level: config.logLevel, name: 'migrate' });
if (!config.databaseUrl) {
  logger.error('DATABASE_URL is not set');
  process.exit(2);
}
const db = createDb(config.databaseUrl, { logger });
try {
  const applied = await migrateLatest(db);
  logger.info({ applied }, applied.length ? 'migrations applied' : 'database already up to date');
} finally {
  await db.destroy();
}
