/**
 * `npm run migrate` (scripts/migrate.ts) against a database that is not up
 * yet, as a compose `migrate` service meets it when the orchestrator does not
 * wait for Postgres's health (podman-compose 1.0): it waits for the database
 * and then migrates, instead of exiting 1 and leaving the schema absent.
 *   npx mocha test/platform/migrate.test.ts
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import pg from 'pg';
import { freePort } from '../../scripts/cluster/index.js';
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from '../helpers/db.js';
import { repoRoot } from '../realtime/helpers.js';
import { tcpForward } from '../deploy/helpers.js';

describe('migrate script: a database that comes up late', function () {
  this.timeout(60_000);
  let db: TestDatabase;
  let late: net.Server | undefined;

  before(async () => {
    db = await createTestDatabase('stt_migrate_late', { migrate: false });
  });
  after(async () => {
    late?.close();
    await db.drop();
  });

  it('waits while connections are refused, then applies every migration and exits 0', async () => {
    const port = await freePort();
    const url = new URL(db.url);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(repoRoot, 'scripts/migrate.ts')], {
      cwd: repoRoot,
      env: { ...process.env, DATABASE_URL: url.toString(), LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b));
    child.stderr.on('data', (b: Buffer) => (out += b));
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    // Postgres "comes up" on that port 3 s later (a forwarder to the real one).
    await new Promise((r) => setTimeout(r, 3000));
    const target = new URL(TEST_DATABASE_URL);
    late = await tcpForward('127.0.0.1', { host: target.hostname, port: Number(target.port || 5432) }, port);
    expect(await exited, out).to.equal(0);
    expect(out).to.match(/waiting for the database/);
    expect(out).to.match(/migrations applied/);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      const r = await c.query(`SELECT count(*)::int AS n FROM knex_migrations`);
      expect(r.rows[0].n).to.be.greaterThan(0);
    } finally {
      await c.end();
    }
  });
});
