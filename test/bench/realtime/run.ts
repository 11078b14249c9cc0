/**
 * Realtime benchmarks (figures recorded in docs/benchmarks/realtime.md).
 * Every server runs in its own process on this machine; clients run here.
 *
 *   npx tsx test/bench/realtime/run.ts idle    [--sessions 10000] [--redis]
 *   npx tsx test/bench/realtime/run.ts streams [--streams 200] [--seconds 30] [--delay 100] [--vad off]
 *   npx tsx test/bench/realtime/run.ts openai  [--streams 200] [--seconds 30] [--pairs 3]
 *
 * or, as production runs the servers, compiled:
 *   npm run build && node dist/test/bench/realtime/run.js streams ...
 * (through tsx, the servers carry tsx's compiler and source maps in their heap).
 *
 * idle:    N authenticated sessions of one key held open without audio (no
 *          instance session cap; `--redis`: limits in Redis); how fast they
 *          open and the realtime process's RSS (from /proc) before and after.
 * streams: N clients stream real speech in 100 ms frames at real-time pace,
 *          silero VAD on, speech from a fake OpenAI-compatible worker in another
 *          process answering after a fixed delay. Measured over the steady
 *          window: realtime CPU per stream (from /proc), event-loop delay p99
 *          (from the server's /stats), client-observed completion latency minus
 *          the worker's fixed delay (gateway overhead). The same load then runs
 *          against a plain `ws` server doing the same session work; the ratio
 *          of CPU per stream is reported.
 * openai:  the same load on the native stream and on /v1/realtime (OpenAI's
 *          protocol: 24 kHz PCM in base64 appends, resampled by the server),
 *          each against a fresh realtime process, alternating `--pairs` times;
 *          prints each run and the median ratio of CPU per stream (issue 25).
 *
 * BENCH_CPU_PROF=<dir>: the servers run with `--cpu-prof` (main thread and VAD
 * threads) and are stopped with SIGTERM so that the profiles are written.
 * BENCH_NODE_ARGS="--trace-gc ...": more Node flags for the measured servers.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js';
import { createDb } from '../../../shared/db/index.js';
import { PlanCatalog } from '../../../shared/plans.js';
import { KeyStore } from '../../../shared/auth/index.js';
import { runLoad } from '../../load/realtime-load.js';
import type { ConfigOverrides } from '../../../shared/config/index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
// Run the servers the way this script runs: compiled JavaScript (as production
// runs them: `npm run build && node dist/test/bench/realtime/run.js`), or
// TypeScript through tsx, whose compiler and source maps then share the heap.
const compiled = import.meta.url.endsWith('.js');
const repoRoot = path.resolve(here, compiled ? '../../../..' : '../../..');
const script = (file: string) => (compiled ? file.replace(/\.ts$/, '.js') : file);
const mode = process.argv[2] ?? 'streams';
const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};

/** `--vad off`: no model at all (utterances only at the max length): isolates transport + session cost. */
const VAD_OFF = process.argv.includes('off');

const PLANS_JSON = JSON.stringify({
  bench: {
    maxConcurrentConnections: 100_000,
    maxConnectionsPerMinute: 1_000_000,
    maxConcurrentUtterances: 4,
    maxSessionSeconds: 14_400,
    idleTimeoutSeconds: 3600,
    maxAudioSecondsPerSession: 14_400,
    maxAudioSecondsPerWindow: 1_000_000_000,
  },
});

const children = new Set<ChildProcess>();
// Never leave a server behind, however this script ends.
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(130));

const PROFILE_DIR = process.env.BENCH_CPU_PROF;

/** Runs `file` in a child process; `overrides` (internal tuning) reach tunedRealtime.ts and plainWsServer.ts as argv[2]. */
function start(
  file: string,
  env: Record<string, string>,
  profile = false,
  overrides: ConfigOverrides = {},
): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(script(file), [JSON.stringify(overrides)], {
    execArgv: [
      ...(compiled ? [] : ['--import', 'tsx']),
      ...(profile && PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []),
      ...(profile && process.env.BENCH_NODE_ARGS ? process.env.BENCH_NODE_ARGS.split(' ') : []),
    ],
    cwd: repoRoot,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', process.env.BENCH_SERVER_LOGS ? 'inherit' : 'ignore', 'inherit', 'ipc'],
  });
  children.add(child);
  return new Promise((resolve, reject) => {
    child.on('message', (m: { type?: string; port?: number }) => {
      if (m.port) resolve({ child, port: m.port });
    });
    child.once('exit', (c) => reject(new Error(`${file} exited ${c}`)));
  });
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** CPU seconds (user + system) used by a process so far. */
function cpuSeconds(pid: number): number {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (100 Hz)
}

async function stats(port: number, reset = false): Promise<any> {
  return (await fetch(`http://127.0.0.1:${port}/stats${reset ? '?reset=1' : ''}`)).json();
}

async function setup(): Promise<{ db: TestDatabase; key: string }> {
  const db = await createTestDatabase('stt_rt_bench');
  const knex = createDb(db.url, { poolMax: 2 });
  const rec = await new KeyStore(knex, new PlanCatalog(JSON.parse(PLANS_JSON))).issue({
    ownerId: 'bench',
    plan: 'bench',
  });
  await knex.destroy();
  return { db, key: rec.key! };
}

/** realtime/main.ts's process, with internal tuning from `start`'s overrides. */
const REALTIME_SERVER = path.join(here, 'tunedRealtime.ts');

/** Silero states created at start; `--vad off` turns the server VAD off by default; key lookups trusted 2 s. */
function tuning(poolWarm: number): ConfigOverrides {
  return {
    auth: { keyCacheTtlMs: 2000 },
    realtime: { vad: { poolWarm }, ...(VAD_OFF ? { vadDefaults: { vad: false } } : {}) },
  };
}

function serverEnv(db: TestDatabase, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    MIGRATE_ON_START: 'false',
    PLANS_JSON,
    REALTIME_PORT: '0',
    REALTIME_HOST: '127.0.0.1',
    DB_POOL_MAX: '8',
    ...extra,
  };
}

/**
 * Loopback addresses the idle clients connect from: an instance lets one
 * address have MAX_AUTHENTICATING_PER_SOURCE upgrades in authentication at
 * once, so 200 in flight come from 8 addresses, 25 each (Linux routes all of
 * 127.0.0.0/8 to lo).
 */
const IDLE_SOURCES = Array.from({ length: 8 }, (_, i) => `127.0.0.${i + 1}`);
const IDLE_PER_SOURCE = 25;

/** Opens `n` sessions of `key` at `url`, 200 upgrades in flight; the sockets and when each `session.created` came. */
async function openIdle(
  url: string,
  key: string,
  n: number,
): Promise<{ sockets: WebSocket[]; at: number[] }> {
  const sockets: WebSocket[] = [];
  const at: number[] = [];
  const t0 = performance.now();
  let next = 0;
  const lane = async (localAddress: string) => {
    while (next < n) {
      next++;
      await new Promise<void>((resolve, reject) => {
        const ws = new WebSocket(url, {
          headers: { authorization: `Bearer ${key}` },
          perMessageDeflate: false,
          localAddress,
        });
        ws.once('message', () => {
          at.push(performance.now() - t0);
          resolve();
        });
        ws.once('error', reject);
        sockets.push(ws);
      });
    }
  };
  await Promise.all(IDLE_SOURCES.flatMap((src) => Array.from({ length: IDLE_PER_SOURCE }, () => lane(src))));
  return { sockets, at };
}

/**
 * The idle bench's own environment: no instance session cap (the embedded
 * default, REALTIME_MAX_SESSIONS=500, would refuse the 501st with 503) unless
 * the caller sets one, and the limits in Redis when `--redis` is given
 * (TEST_REDIS_URL, else REDIS_URL, else the default port), as a scaled
 * deployment keeps them.
 */
function idleEnv(): Record<string, string> {
  const env: Record<string, string> = { REALTIME_MAX_SESSIONS: process.env.REALTIME_MAX_SESSIONS ?? '0' };
  if (process.argv.includes('--redis')) {
    env.REDIS_URL = process.env.TEST_REDIS_URL ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  }
  return env;
}

async function idle(): Promise<void> {
  const n = arg('sessions', 10_000);
  const { db, key } = await setup();
  const worker = await start(path.join(here, 'fakeWorker.ts'), {});
  const env = idleEnv();
  const rtp = await start(
    REALTIME_SERVER,
    serverEnv(db, { STT_WORKER_URLS: `http://127.0.0.1:${worker.port}`, ...env }),
    true,
    tuning(0),
  );
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const before = rssMiB(rtp.child.pid!);
    const url = `ws://127.0.0.1:${rtp.port}/v1/audio/transcriptions/stream`;
    const { sockets, at } = await openIdle(url, key, n);
    const openMs = Math.max(...at);
    // Let a renewal interval or two pass with every session held, then measure.
    await new Promise((r) => setTimeout(r, 6000));
    const s = await stats(rtp.port);
    const after = rssMiB(rtp.child.pid!);
    const sorted = [...at].sort((x, y) => x - y);
    const openedBy = (k: number) => +(sorted[Math.min(k, sorted.length) - 1] / 1000).toFixed(1);
    const out = {
      limits: env.REDIS_URL ? 'redis' : 'memory',
      sessions: at.length,
      serverSessions: s.sessions,
      openSeconds: openMs / 1000,
      // The n-th session.created, in seconds from the start: a rate that falls as the instance fills shows here.
      openedBySeconds: Object.fromEntries(
        [1000, 3000, 5000, n].filter((k) => k <= n).map((k) => [k, openedBy(k)]),
      ),
      rssBeforeMiB: Math.round(before),
      rssAfterMiB: Math.round(after),
      rssAddedMiB: Math.round(after - before),
      perSessionKiB: Math.round(((after - before) * 1024) / at.length),
      heapUsedMiB: Math.round(s.memory.heapUsed / 1048576),
    };
    console.log(JSON.stringify({ bench: 'realtime idle sessions', ...out }, null, 2));
    for (const ws of sockets) ws.terminate();
  } finally {
    if (PROFILE_DIR) {
      // A graceful stop writes the CPU profiles.
      const exited = new Promise((r) => rtp.child.once('exit', r));
      rtp.child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    }
    rtp.child.kill('SIGKILL');
    worker.child.kill('SIGKILL');
    await db.drop();
  }
}

async function streamsAgainst(
  label: string,
  file: string,
  db: TestDatabase,
  key: string,
  workerPort: number,
  n: number,
  seconds: number,
  delay: number,
  protocol: 'native' | 'openai' = 'native',
) {
  const srv = await start(
    file,
    serverEnv(db, {
      STT_WORKER_URLS: `http://127.0.0.1:${workerPort}`,
      STT_ATTEMPT_TIMEOUT_MS: '5000',
      STT_BUDGET_MS: '10000',
    }),
    true,
    tuning(VAD_OFF ? 0 : Math.min(n, 256)),
  );
  try {
    const warmup = 8;
    const url =
      protocol === 'openai'
        ? `ws://127.0.0.1:${srv.port}/v1/realtime?intent=transcription`
        : `ws://127.0.0.1:${srv.port}/v1/audio/transcriptions/stream`;
    const load = runLoad({
      protocol,
      url,
      headers: { authorization: `Bearer ${key}` },
      clients: n,
      seconds: seconds + warmup,
      rampMs: 3000,
    });
    // Steady window: after the ramp and a warm-up, for `seconds`.
    await new Promise((r) => setTimeout(r, 3000 + warmup * 1000));
    await stats(srv.port, true);
    const cpu0 = cpuSeconds(srv.child.pid!);
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, seconds * 1000 - 500));
    const cpu1 = cpuSeconds(srv.child.pid!);
    const wall = (Date.now() - t0) / 1000;
    const s = await stats(srv.port);
    const rss = rssMiB(srv.child.pid!);
    const r = await load;
    const coresUsed = (cpu1 - cpu0) / wall;
    return {
      server: label,
      streams: n,
      connected: r.connected,
      cpuCores: Math.round(coresUsed * 1000) / 1000,
      cpuPercentPerStream: Math.round((coresUsed / n) * 100 * 1000) / 1000,
      eventLoopLagMs: s.eventLoopLagMs,
      vadPool: s.vad,
      rssMiB: Math.round(rss),
      utterances: r.utterances,
      failedUtterances: r.failedUtterances,
      completionMs: r.completionMs,
      /** Client-observed completion minus the worker's fixed delay: includes the HTTP client to the worker. */
      overheadIncludingWorkerCallMs: {
        p50: Math.round((r.completionMs.p50 - delay) * 10) / 10,
        p99: Math.round((r.completionMs.p99 - delay) * 10) / 10,
      },
      /** Server-side: speech_stopped -> completed minus the engine call (what the realtime tier itself adds). */
      gatewayOverheadMs: s.gatewayOverheadMs ?? null,
      connectMs: r.connectMs,
      closes: r.closes,
    };
  } finally {
    if (PROFILE_DIR) {
      // A graceful stop writes the CPU profiles.
      const exited = new Promise((r) => srv.child.once('exit', r));
      srv.child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    }
    srv.child.kill('SIGKILL');
  }
}

async function streams(): Promise<void> {
  const n = arg('streams', 200);
  const seconds = arg('seconds', 30);
  const delay = arg('delay', 100);
  const { db, key } = await setup();
  const worker = await start(path.join(here, 'fakeWorker.ts'), { FAKE_DELAY_MS: String(delay) });
  try {
    const uws = await streamsAgainst(
      'uWebSockets.js (realtime/main.ts)',
      REALTIME_SERVER,
      db,
      key,
      worker.port,
      n,
      seconds,
      delay,
    );
    console.log(JSON.stringify(uws, null, 2));
    const plain = await streamsAgainst(
      'plain ws (test/bench/realtime/plainWsServer.ts)',
      path.join(here, 'plainWsServer.ts'),
      db,
      key,
      worker.port,
      n,
      seconds,
      delay,
    );
    console.log(JSON.stringify(plain, null, 2));
    console.log(
      JSON.stringify(
        {
          cpuRatio_uws_over_ws: Math.round((uws.cpuCores / plain.cpuCores) * 100) / 100,
          loopDelayP99Ratio_uws_over_ws:
            Math.round((uws.eventLoopLagMs.p99 / Math.max(0.01, plain.eventLoopLagMs.p99)) * 100) / 100,
        },
        null,
        2,
      ),
    );
  } finally {
    worker.child.kill('SIGKILL');
    await db.drop();
  }
}

/** Native and OpenAI protocol side by side, alternating, on the real realtime process. */
async function openaiVsNative(): Promise<void> {
  const n = arg('streams', 200);
  const seconds = arg('seconds', 30);
  const pairs = arg('pairs', 3);
  const delay = 100;
  const { db, key } = await setup();
  const worker = await start(path.join(here, 'fakeWorker.ts'), { FAKE_DELAY_MS: String(delay) });
  const ratios: { cpu: number; lagP99: number }[] = [];
  try {
    for (let i = 0; i < pairs; i++) {
      const run = (p: 'native' | 'openai') =>
        streamsAgainst(`realtime/main.ts, ${p}`, REALTIME_SERVER, db, key, worker.port, n, seconds, delay, p);
      const native = await run('native');
      const openai = await run('openai');
      for (const r of [native, openai])
        console.log(
          JSON.stringify({
            pair: i + 1,
            server: r.server,
            connected: r.connected,
            cpuPercentPerStream: r.cpuPercentPerStream,
            eventLoopLagP99Ms: r.eventLoopLagMs.p99,
            utterances: r.utterances,
            failedUtterances: r.failedUtterances,
            completionMs: r.completionMs,
            closes: r.closes,
            // Silero's work since the process started (the same load on both): model calls and windows.
            vadModels: (r.vadPool as { models?: unknown }).models,
          }),
        );
      ratios.push({
        cpu: openai.cpuCores / native.cpuCores,
        lagP99: openai.eventLoopLagMs.p99 / Math.max(0.01, native.eventLoopLagMs.p99),
      });
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(
      JSON.stringify(
        {
          streams: n,
          pairs,
          cpuPerStreamRatio_openai_over_native: ratios.map((r) => Math.round(r.cpu * 100) / 100),
          medianCpuRatio: Math.round(median(ratios.map((r) => r.cpu)) * 100) / 100,
          medianLagP99Ratio: Math.round(median(ratios.map((r) => r.lagP99)) * 100) / 100,
        },
        null,
        2,
      ),
    );
  } finally {
    worker.child.kill('SIGKILL');
    await db.drop();
  }
}

await (mode === 'idle' ? idle() : mode === 'openai' ? openaiVsNative() : streams());
process.exit(0);
