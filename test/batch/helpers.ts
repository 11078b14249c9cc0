/**
 * Batch test fixtures: an app with the batch routes and runtime on its own
 * database, test recordings built from test/audio with sox, and a
 * loopback HTTP server that serves them (and records webhook calls).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { PgBoss } from 'pg-boss';
import request from 'supertest';
import type { BatchRuntime } from '../../api/batch/runtime.js';
import type { RunnerHooks } from '../../api/batch/workflow.js';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import type { ConfigOverrides } from '../../shared/config/index.js';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const audioDir = path.resolve(repoRoot, 'test/audio');

export const REFS: Record<string, string> = Object.fromEntries(
  fs
    .readFileSync(path.join(audioDir, 'refs.tsv'), 'utf8')
    .trim()
    .split('\n')
    .slice(1)
    .map((l) => l.split('\t'))
    .map(([f, , ref]) => [f, ref]),
);

export function tmpDir(prefix = 'batch-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Concatenates clips with `gap` seconds of silence between them (sox). */
export function buildRecording(out: string, clips: string[], gap = 0.8): string {
  const args: string[] = [];
  const silence = path.join(path.dirname(out), `silence-${gap}.wav`);
  execFileSync('sox', ['-n', '-r', '16000', '-c', '1', '-b', '16', silence, 'trim', '0', String(gap)]);
  clips.forEach((c, i) => {
    if (i > 0) args.push(silence);
    args.push(path.join(audioDir, c));
  });
  execFileSync('sox', [...args, out]);
  return out;
}

export function durationOf(file: string): number {
  return Number(execFileSync('soxi', ['-D', file]).toString().trim());
}

export interface FileServer {
  url: string;
  port: number;
  hits: string[];
  /**
   * Webhook calls received (path, headers, body, arrival time). POSTs to
   * `/big…` are answered 200 with a 1 MiB body; to `/hang…`, never.
   */
  posts: { path: string; headers: http.IncomingHttpHeaders; body: string; at: number }[];
  /** Status codes to answer POSTs with, consumed in order (default 200). */
  postStatuses: number[];
  close(): Promise<void>;
}

/** Serves files of `dir` on 127.0.0.1 and records POSTs. */
export async function startFileServer(dir: string): Promise<FileServer> {
  const hits: string[] = [];
  const posts: FileServer['posts'] = [];
  const postStatuses: number[] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    hits.push(url.pathname);
    if (req.method === 'POST') {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        posts.push({
          path: url.pathname,
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
          at: Date.now(),
        });
        if (url.pathname.startsWith('/hang')) return;
        if (url.pathname.startsWith('/big')) return void res.writeHead(200).end(Buffer.alloc(1 << 20, 'x'));
        res.writeHead(postStatuses.shift() ?? 200).end('ok');
      });
      return;
    }
    if (url.pathname.startsWith('/redirect/')) {
      res.writeHead(302, { location: decodeURIComponent(url.pathname.slice('/redirect/'.length)) }).end();
      return;
    }
    const file = path.join(dir, path.basename(url.pathname));
    if (!fs.existsSync(file)) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': fs.statSync(file).size });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    hits,
    posts,
    postStatuses,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface BatchTestApp extends TestApp {
  runtime: BatchRuntime;
  dataDir: string;
  engineCalls: { workflowId: string; chunk: number }[];
  /** The runner hooks given to the composition root (tests may set more of them). */
  hooks: RunnerHooks;
}

export const BATCH_TEST_ENV = {
  OUTBOUND_ALLOW: '127.0.0.1',
  // pg-boss's shortest heartbeat: a dead worker's job is retried within about 13 s.
  BATCH_HEARTBEAT_SECONDS: '10',
  STT_THREADS: '2',
  // Correctness here, speed in benchmarks: a loaded CI machine must not time decodes out.
  STT_BUILTIN_TIMEOUT_BASE_MS: '60000',
  WEBHOOK_BASE_DELAY_SECONDS: '1',
  WEBHOOK_MAX_DELAY_SECONDS: '2',
  // Tests poll every 50-100 ms; the poll limit itself is tested in test/platform/limits.test.ts.
  POLL_REQUESTS_PER_MINUTE: '0',
};

/** Internal tuning of the batch tests: retention and lost webhook deliveries are looked for twice a second. */
export const BATCH_TEST_OVERRIDES = { batch: { sweepIntervalMs: 500 } } satisfies ConfigOverrides;

/** The full app (batch routes included); `start` also runs the pg-boss workers in this process. */
export async function createBatchTestApp(
  env: Record<string, string> = {},
  opts: { start?: boolean; overrides?: ConfigOverrides } = {},
): Promise<BatchTestApp> {
  const dataDir = tmpDir('batch-data-');
  const { batch, ...rest } = opts.overrides ?? {};
  const engineCalls: BatchTestApp['engineCalls'] = [];
  const hooks: RunnerHooks = { onEngineCall: (workflowId, chunk) => engineCalls.push({ workflowId, chunk }) };
  const t = await createTestApp(
    { ...BATCH_TEST_ENV, DATA_DIR: dataDir, WEBHOOK_SECRET: TEST_WEBHOOK_SECRET, ...env },
    { overrides: { ...rest, batch: { ...BATCH_TEST_OVERRIDES.batch, ...batch } }, deps: { hooks } },
  );
  const runtime = t.deps.batch;
  if (opts.start) await runtime.start({ workers: true });
  const close = t.close;
  return {
    ...t,
    runtime,
    dataDir,
    engineCalls,
    hooks,
    async close() {
      await close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * A pg-boss client of the app's schema that does no maintenance: what a test
 * reads the batch plane's jobs through (pg-boss's API), or a worker it lets die.
 */
export async function pgBossClient(t: BatchTestApp): Promise<PgBoss> {
  const boss = new PgBoss({
    connectionString: t.db.url,
    schema: t.config.batch.pgBossSchema,
    supervise: false,
  });
  boss.on('error', () => {});
  return boss.start();
}

/** What a batch test file's suite runs against (batchSuite); its fields are set by the suite's `before`. */
export interface BatchSuite {
  t: BatchTestApp;
  /** Serves the suite's recordings (and records webhook calls). */
  files: FileServer;
  /** The suite's own folder: its recordings and whatever a test writes. */
  dir: string;
  /** A pg-boss client of the app's schema (with `boss: true`). */
  boss: PgBoss;
  /** Runs after the suite, before the app closes (workers, children, servers a test started). */
  cleanup(fn: () => unknown): void;
}

/**
 * The set-up every batch suite repeats, once: recordings built into a folder of its own and served
 * on loopback, the batch app on its own database, started as `run` says (`workers`: pg-boss workers
 * in this process; `producer`: submissions and pg-boss's supervisor only, the workers live elsewhere;
 * `none`), and optionally a pg-boss client. Everything is stopped and removed after the suite, in
 * reverse order. Call inside `describe`.
 */
export function batchSuite(opts: {
  prefix: string;
  recordings?: Record<string, { clips: string[]; gap?: number }>;
  /** Other files to serve, made in `before` (name -> content). */
  write?: () => Record<string, Buffer>;
  env?: Record<string, string>;
  run: 'workers' | 'producer' | 'none';
  boss?: boolean;
  overrides?: ConfigOverrides;
}): BatchSuite {
  const cleanups: (() => unknown)[] = [];
  const dir = tmpDir(`batch-${opts.prefix}-`);
  const suite = { dir, cleanup: (fn: () => unknown) => void cleanups.push(fn) } as BatchSuite;
  before(async () => {
    for (const [name, r] of Object.entries(opts.recordings ?? {}))
      buildRecording(path.join(dir, name), r.clips, r.gap ?? 0.8);
    for (const [name, content] of Object.entries(opts.write?.() ?? {}))
      fs.writeFileSync(path.join(dir, name), content);
    suite.files = await startFileServer(dir);
    suite.t = await createBatchTestApp(
      { ...(opts.run === 'workers' ? {} : { BATCH_WORKERS: 'false' }), ...opts.env },
      { start: opts.run === 'workers', overrides: opts.overrides },
    );
    if (opts.run === 'producer') await suite.t.runtime.start({ workers: false });
    if (opts.boss) suite.boss = await pgBossClient(suite.t);
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
    await suite.boss?.stop({ graceful: false }).catch(() => {});
    await suite.t?.close();
    await suite.files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return suite;
}

export const TEST_WEBHOOK_SECRET = `whsec_${Buffer.from('batch-test-secret-0123456789abcdef').toString('base64')}`;

export { issueKey };

export async function waitFor<T>(
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('waitFor timed out');
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export function randomId(prefix = 'req'): string {
  return `${prefix}-${randomBytes(6).toString('hex')}`;
}

/** Submits a batch job of `audioUrl` (expects 202); resolves with its workflow id. */
export async function submitJob(t: TestApp, key: string, audioUrl: string): Promise<string> {
  const res = await request(t.server)
    .post('/v1/audio/transcriptions/jobs')
    .set('authorization', `Bearer ${key}`)
    .send({ audio_url: audioUrl });
  expect(res.status, JSON.stringify(res.body)).to.equal(202);
  return res.body.workflow_id as string;
}

/** A job's poll as its owner sees it. */
export async function pollJob(
  t: TestApp,
  key: string,
  id: string,
): Promise<{ status: string; error: { name: string; message: string } | null }> {
  const res = await request(t.server)
    .get(`/v1/audio/transcriptions/jobs/${id}`)
    .set('authorization', `Bearer ${key}`);
  return res.body as { status: string; error: { name: string; message: string } | null };
}

/**
 * A batch worker process (test/batch/fixtures/worker.ts: pg-boss workers and supervisor, real engine) on
 * the app's database and data folder, with pg-boss's shortest heartbeat (stale jobs are looked for every
 * 3 s) and one decoder thread; engine calls are appended to `callLog`. Resolves once it is ready.
 */
export function startWorkerProcess(t: BatchTestApp, callLog: string): Promise<ChildProcess> {
  const env = {
    DATABASE_URL: t.db.url,
    DATA_DIR: t.dataDir,
    WEBHOOK_SECRET: TEST_WEBHOOK_SECRET,
    OUTBOUND_ALLOW: '127.0.0.1',
    BATCH_HEARTBEAT_SECONDS: '10',
    STT_THREADS: '1',
    LOG_LEVEL: 'warn',
  };
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(repoRoot, 'test/batch/fixtures/worker.ts'), callLog],
    {
      cwd: repoRoot,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
    child.stdout!.on('data', (d: Buffer) => {
      if (process.env.BATCH_TEST_DEBUG) process.stderr.write(d);
      if (d.toString().includes('ready')) resolve(child);
    });
  });
}

/** The recordings of `buildMinuteOfSpeech`, in order (their references are in test/audio/refs.tsv). */
export const MINUTE_OF_SPEECH_CLIPS = [
  'librispeech-1221-135766-0001.wav',
  'jfk.wav',
  'librivox-austen-0870.wav',
  'librispeech-1089-134686-0001.wav',
  'librivox-austen-0890.wav',
  'jfk.wav',
  'librivox-austen-0880.wav',
];

/** About a minute of speech: six recordings (jfk.wav twice) with pauses between them, as `out`. */
export function buildMinuteOfSpeech(out: string): string {
  return buildRecording(out, MINUTE_OF_SPEECH_CLIPS, 0.8);
}
