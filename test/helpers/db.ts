/**
 * Each test suite gets its own database on the machine's Postgres
 * (TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres),
 * migrated to the latest schema and dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createDb, migrateLatest } from '../../shared/db/index.js';

export const TEST_DATABASE_URL =
  process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/** A fresh database (migrated unless `migrate: false`: then empty, for a migration to create). */
export async function createTestDatabase(
  prefix = 'stt_test',
  opts: { migrate?: boolean } = {},
): Promise<TestDatabase> {
  const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(TEST_DATABASE_URL, name);
  if (opts.migrate !== false) {
    const db = createDb(url, { poolMax: 2 });
    try {
      await migrateLatest(db);
    } finally {
      await db.destroy();
    }
  }
  return {
    name,
    url,
    async drop() {
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
