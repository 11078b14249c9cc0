/**
 * Postgres access through knex. Migrations are knex migration files under
 * migrations/; `migrateLatest` runs them under a Postgres advisory lock so that
 * several instances starting together never race (knex's own lock table
 * guards the migration rows, the advisory lock makes the others wait instead
 * of failing).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import knexFactory, { type Knex } from 'knex';

export type { Knex };

const here = path.dirname(fileURLToPath(import.meta.url));
export const MIGRATIONS_DIR = path.resolve(here, '../../migrations');

/** Arbitrary constant identifying our migration lock among advisory locks. */
const MIGRATION_LOCK_ID = 727_001;

interface DbLogger {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

/**
 * Client-side bound on one query (node-postgres `query_timeout`): a frozen or
 * unreachable server fails a query in this time ("Query read timeout", a
 * dependency refusal: 503 with Retry-After) instead of holding the request
 * for the whole outage. Server-side timeouts cannot see a server that is
 * frozen. Migrations run by `npm run migrate` have none (`queryTimeoutMs: 0`).
 */
export const DB_QUERY_TIMEOUT_MS = 10_000;

/** A knex log message without the stack some of them carry. */
export function firstLine(m: unknown): string {
  return String(m).split('\n', 1)[0];
}

export function createDb(
  databaseUrl: string,
  opts: { poolMax?: number; searchPath?: string; logger?: DbLogger; queryTimeoutMs?: number } = {},
): Knex {
  const queryTimeoutMs = opts.queryTimeoutMs ?? DB_QUERY_TIMEOUT_MS;
  const l = opts.logger;
  return knexFactory({
    // knex prints to the console by default; route its messages into our structured log.
    // Its messages can carry a stack ("Acquire connection error: ...\n    at /srv/.../tarn/..."): the first
    // line is the message; the stack would put server paths in the log.
    log: {
      warn: (m: unknown) => l?.warn({ detail: firstLine(m) }, 'knex warning'),
      error: (m: unknown) => l?.error({ detail: firstLine(m) }, 'knex error'),
      deprecate: (m: unknown) => l?.warn({ detail: firstLine(m) }, 'knex deprecation'),
      debug: (m: unknown) => l?.debug({ detail: firstLine(m) }, 'knex debug'),
    },
    client: 'pg',
    connection: {
      connectionString: databaseUrl,
      connectionTimeoutMillis: 5000,
      ...(queryTimeoutMs > 0 ? { query_timeout: queryTimeoutMs } : {}),
    },
    searchPath: opts.searchPath ? [opts.searchPath] : undefined,
    pool: { min: 0, max: opts.poolMax ?? 10, acquireTimeoutMillis: 5000, idleTimeoutMillis: 30_000 },
    acquireConnectionTimeout: 5000,
  });
}

/**
 * Migrations are recorded by name without extension, so a database migrated
 * from TypeScript sources (tsx, tests) and one migrated by the compiled build
 * (dist/, Docker) agree on what has run.
 */
class ExtensionlessMigrationSource implements Knex.MigrationSource<string> {
  getMigrations(): Promise<string[]> {
    return Promise.resolve(
      fs
        .readdirSync(MIGRATIONS_DIR)
        .filter((f) => /\.(ts|js)$/.test(f) && !f.endsWith('.d.ts'))
        .sort(),
    );
  }

  getMigrationName(file: string): string {
    return file.replace(/\.(ts|js)$/, '');
  }

  async getMigration(file: string): Promise<Knex.Migration> {
    return (await import(pathToFileURL(path.join(MIGRATIONS_DIR, file)).href)) as Knex.Migration;
  }
}

export function migrationConfig(): Knex.MigratorConfig {
  return { migrationSource: new ExtensionlessMigrationSource(), tableName: 'knex_migrations' };
}

/**
 * Runs `fn` holding the migration advisory lock (held by a transaction's connection), so
 * that start-up schema work of instances starting together runs one at a time:
 * knex migrations, and pg-boss's own schema and queue creation, which deadlock
 * against each other when two processes run them at once.
 */
export async function withMigrationLock<T>(db: Knex, fn: () => Promise<T>): Promise<T> {
  // A transaction-scoped lock on the transaction's own connection: released when it ends, however it ends.
  // Polled rather than waited for in one query: another instance may migrate for longer than
  // the query timeout.
  return db.transaction(async (trx) => {
    for (;;) {
      const { rows } = await trx.raw<{ rows: { locked: boolean }[] }>(
        'SELECT pg_try_advisory_xact_lock(?) AS locked',
        [MIGRATION_LOCK_ID],
      );
      if (rows[0]?.locked) return fn();
      await new Promise((r) => setTimeout(r, 200));
    }
  });
}

export async function migrateLatest(db: Knex): Promise<string[]> {
  return withMigrationLock(db, async () => {
    const [, applied] = (await db.migrate.latest(migrationConfig())) as [number, string[]];
    return applied;
  });
}

/**
 * Migrations at start-up, the one path every process takes (the API, the
 * realtime tier, `npm start` before either): when the configuration says so
 * (MIGRATE_ON_START), under the migration lock, logging what was applied;
 * the migrations applied.
 */
export async function migrateIfConfigured(p: {
  config: { migrateOnStart: boolean };
  db: Knex;
  logger: { info(obj: object, msg: string): void };
}): Promise<string[]> {
  if (!p.config.migrateOnStart) return [];
  const applied = await migrateLatest(p.db);
  if (applied.length) p.logger.info({ applied }, 'database migrated');
  return applied;
}

/** True when the database answers a trivial query within the timeout. */
export async function pingDb(db: Knex, timeoutMs = 2000): Promise<boolean> {
  try {
    await Promise.race([
      db.raw('select 1'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('db ping timeout')), timeoutMs).unref()),
    ]);
    return true;
  } catch {
    return false;
  }
}
