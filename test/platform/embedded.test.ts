import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createDb, migrateLatest, migrationConfig } from '../../shared/db/index.js';
import { createTestDatabase } from '../helpers/db.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');

/** No configuration at all beyond where to keep data and which ports to use. */
function serviceEnv(dataDir: string, pgPort: number, port = 0): Record<string, string> {
  return {
    PATH: process.env.PATH!,
    HOME: process.env.HOME ?? '/root',
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    EMBEDDED_PG_PORT: String(pgPort),
    HTTPS_PORT: '0',
    LOG_LEVEL: 'warn',
  };
}

function startService(
  dataDir: string,
  pgPort: number,
): Promise<{ child: ChildProcess; out: () => string; baseUrl: string }> {
  const env = serviceEnv(dataDir, pgPort);
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start banner:\n${out}`)), 90_000);
    const check = () => {
      const m = /service is up on (http:\/\/localhost:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        // The banner is complete once the docs line is printed.
        setTimeout(() => resolve({ child, out: () => out, baseUrl: m[1] }), 100);
      }
    };
    child.stdout!.on('data', check);
    child.once('exit', (c) => reject(new Error(`start exited ${c}:\n${out}`)));
  });
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGINT');
  await exited;
}

describe('embedded start (npm start with no configuration)', function () {
  this.timeout(180_000);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-embedded-'));
  const pgPort = 55_000 + Math.floor(Math.random() * 5000);
  after(() => fs.rmSync(dataDir, { recursive: true, force: true }));

  it('runs real Postgres, prints the admin token once with a working example, and keeps data across a restart', async () => {
    const first = await startService(dataDir, pgPort);
    let keyId: string;
    try {
      const token = /Admin token.*\n\s+(adm_\S+)/.exec(first.out())?.[1];
      expect(token, first.out()).to.be.a('string');
      expect(first.out()).to.include(`curl -s -X POST ${first.baseUrl}/v1/external-transcription/keys`);
      const issued = await fetch(`${first.baseUrl}/v1/external-transcription/keys`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ owner_id: 'me', plan: 'free' }),
      });
      expect(issued.status).to.equal(201);
      const rec = (await issued.json()) as { data: { id: string; key: string } };
      keyId = rec.data.id;
      const tok = await fetch(`${first.baseUrl}/v1/audio/transcriptions/session-token`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${rec.data.key}` },
      });
      expect(tok.status).to.equal(200);
      expect(first.out()).not.to.include(rec.data.key);
      // It is a real Postgres server, with its data under DATA_DIR.
      expect(fs.existsSync(path.join(dataDir, 'pg', 'PG_VERSION'))).to.equal(true);
      // A second start on the same data (or on a taken API port) says why it cannot, in one line.
      const again = (env: Record<string, string>) =>
        spawnSync(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
          cwd: ROOT,
          env,
          encoding: 'utf8',
          timeout: 60_000,
        });
      const twice = again(serviceEnv(dataDir, pgPort));
      expect(twice.status).to.equal(1);
      expect(twice.stderr).to.include(`Port ${pgPort} of the embedded Postgres is already in use`);
      const apiPort = Number(new URL(first.baseUrl).port);
      const otherDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-embedded-2-'));
      try {
        const taken = again(serviceEnv(otherDir, pgPort + 1, apiPort));
        expect(taken.status).to.equal(1);
        expect(taken.stderr).to.include(`Port ${apiPort} is already in use`).and.include('PORT=');
      } finally {
        fs.rmSync(otherDir, { recursive: true, force: true });
      }
    } finally {
      await stop(first.child);
    }

    const second = await startService(dataDir, pgPort);
    try {
      expect(second.out()).not.to.match(/adm_/); // printed once only
      expect(second.out()).to.include(`Admin token: in ${dataDir}/secrets.json`);
      const secrets = JSON.parse(fs.readFileSync(path.join(dataDir, 'secrets.json'), 'utf8'));
      const res = await fetch(`${second.baseUrl}/v1/external-transcription/keys/${keyId!}`, {
        headers: { Authorization: `Bearer ${secrets.adminToken}` },
      });
      expect(res.status).to.equal(200);
      const body = (await res.json()) as { data: { lastUsedAt: string | null } };
      expect(body.data.lastUsedAt).to.be.a('string'); // flushed at shutdown
    } finally {
      await stop(second.child);
    }
    // Postgres stopped with the service.
    const probe = new pg.Client({
      host: '127.0.0.1',
      port: pgPort,
      user: 'postgres',
      database: 'postgres',
      connectionTimeoutMillis: 1000,
    });
    let refused = false;
    await probe.connect().catch(() => (refused = true));
    if (!refused) await probe.end();
    expect(refused).to.equal(true);
  });
});

describe('migrations', () => {
  it('records migrations without their extension, so TypeScript and compiled runs agree', async () => {
    const t = await createTestDatabase('stt_migrate');
    const db = createDb(t.url);
    try {
      const names = (await db('knex_migrations').select('name')).map((r: { name: string }) => r.name);
      expect(names).to.include('20261121000000_platform');
      expect(names.every((n: string) => !/\.(ts|js)$/.test(n))).to.equal(true);
    } finally {
      await db.destroy();
      await t.drop();
    }
  });

  it('two instances migrating the same fresh database at once both succeed (advisory lock)', async () => {
    const t = await createTestDatabase('stt_migrate');
    // createTestDatabase already migrated; roll back to a fresh schema first.
    const reset = createDb(t.url);
    await reset.migrate.rollback(migrationConfig(), true);
    await reset.destroy();
    const a = createDb(t.url);
    const b = createDb(t.url);
    try {
      const [ra, rb] = await Promise.all([migrateLatest(a), migrateLatest(b)]);
      expect(ra.length + rb.length).to.be.greaterThan(0);
      expect(Math.min(ra.length, rb.length)).to.equal(0); // one did the work, the other found nothing to do
      expect((await a('api_keys').count<{ count: string }[]>())[0].count).to.equal('0');
    } finally {
      await a.destroy();
      await b.destroy();
      await t.drop();
    }
  });
});
