/**
 * Postgres and Redis for the suite on a machine that has neither (issue 39:
 * on a laptop, `npm test` failed in its first database test). When
 * TEST_DATABASE_URL / TEST_REDIS_URL are not set and nothing answers on
 * 127.0.0.1:5432 / :6379, the suite starts its own: embedded Postgres (the
 * package `npm start` uses) and a `redis-server` (installed by setup), each
 * on a free port, and sets the variables for the test workers, which mocha
 * starts after this. Tests that freeze or kill a dependency start their own
 * instances as before. Loaded by globalSetup.ts (`npm test`) and by
 * .mocharc (`npx mocha <file>`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { runEmbeddedPostgres, type RunningPostgres } from '../../scripts/embedded/postgresProcess.js';
import { freePort } from '../../scripts/cluster/processes.js';

/** Whether something accepts TCP connections on 127.0.0.1:port within a second. */
function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, timeout: 1000 });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
    s.once('timeout', () => done(false));
  });
}

let postgres: RunningPostgres | undefined;
let pgDir: string | undefined;
let redis: ChildProcess | undefined;

async function startRedis(): Promise<string> {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: 'ignore',
    },
  );
  await new Promise<void>((resolve, reject) => {
    child.once('error', (err) =>
      reject(new Error(`redis-server could not start (${err.message}); run npm run setup`)),
    );
    const deadline = Date.now() + 10_000;
    const poll = async () => {
      if (await answers(port)) return resolve();
      if (Date.now() > deadline) return reject(new Error('redis-server did not answer within 10 s'));
      setTimeout(() => void poll(), 100);
    };
    void poll();
  });
  redis = child;
  return `redis://127.0.0.1:${port}`;
}

/** Starts what is missing; returns what it started, for the log. */
export async function startLocalServices(): Promise<string[]> {
  const started: string[] = [];
  if (!process.env.TEST_DATABASE_URL && !(await answers(5432))) {
    // World-traversable when run as root: the embedded server runs as the `postgres` user.
    pgDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-test-pg-'));
    fs.chmodSync(pgDir, 0o755);
    postgres = await runEmbeddedPostgres(pgDir, await freePort(), randomBytes(12).toString('hex'), 'warn');
    process.env.TEST_DATABASE_URL = postgres.url;
    started.push(`embedded Postgres (${new URL(postgres.url).port})`);
  }
  if (!process.env.TEST_REDIS_URL && !(await answers(6379))) {
    process.env.TEST_REDIS_URL = await startRedis();
    started.push(`redis-server (${new URL(process.env.TEST_REDIS_URL).port})`);
  }
  return started;
}

export async function stopLocalServices(): Promise<void> {
  redis?.kill('SIGTERM');
  redis = undefined;
  await postgres?.stop();
  postgres = undefined;
  if (pgDir) fs.rmSync(pgDir, { recursive: true, force: true });
  pgDir = undefined;
}

// At import, which mocha awaits for `--require` before it loads the spec files (serial runs) or starts
// its workers (parallel runs; they inherit the variables, so in them this starts nothing).
const started = await startLocalServices();
if (started.length) console.log(`  started ${started.join(' and ')} for the tests`);

export async function mochaGlobalTeardown(): Promise<void> {
  await stopLocalServices();
}
