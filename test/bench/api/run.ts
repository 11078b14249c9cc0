/**
 * API benchmark: autocannon against the real API (authenticated, Redis
 * rate-limited routes) and, in the same run, a bare Koa hello-world, each in
 * its own process on this machine. Rounds alternate between targets; medians
 * are reported with the ratio to bare Koa. The last target is the poll floor
 * (pollFloor.ts): the same poll with no request path around it.
 *
 *   npx tsx test/bench/api/run.ts [--duration 10] [--connections 50] [--rounds 3] [--warmup 2]
 *     [--server-cpu 0] [--client-cpu 1] [--cpu-prof DIR] [--perf] [--only TEXT]
 *
 * or, as production runs it, compiled:  npm run build && node dist/test/bench/api/run.js
 *
 * Fairness: on a machine with two or more cores every server process is
 * pinned (taskset) to `--server-cpu` and this process, which runs the load
 * generator, to `--client-cpu`, so the generator never competes with the
 * server it measures; both servers get the same core, connections and
 * duration. `--server-cpu -1` turns pinning off. Each target is warmed up
 * (JIT, caches, the key cache) before the measured rounds. `--cpu-prof DIR`
 * runs the API server under `node --cpu-prof` and writes its profile there.
 * `--perf` also counts the server's instructions per request (`perf stat`,
 * user + kernel), which a busy shared machine disturbs far less than time.
 */
import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { createTestDatabase, TEST_REDIS_URL } from '../../helpers/db.js';
import { instructionsDuring, pinToCpu as pin } from './measure.js';

const here = path.dirname(fileURLToPath(import.meta.url));
// Run the servers the way this script runs: compiled JavaScript, or TypeScript through tsx.
const compiled = import.meta.url.endsWith('.js');
const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const duration = arg('duration', 10);
const connections = arg('connections', 50);
const rounds = arg('rounds', 3);
const warmup = arg('warmup', 2);
const cores = os.availableParallelism();
const serverCpu = arg('server-cpu', cores >= 2 ? 0 : -1);
const clientCpu = arg('client-cpu', cores >= 2 ? 1 : -1);
const usePerf = process.argv.includes('--perf');
const profIndex = process.argv.indexOf('--cpu-prof');
const profDir = profIndex > 0 ? path.resolve(process.argv[profIndex + 1]) : undefined;

const servers = new Set<ChildProcess>();
// Never leave a server behind, however this script ends (a server that fails to start included).
process.on('exit', () => {
  for (const c of servers) if (c.exitCode === null) c.kill('SIGKILL');
});

function start(
  file: string,
  env: Record<string, string> = {},
  extraExecArgv: string[] = [],
): Promise<{ child: ChildProcess; port: number; floorPort?: number; key?: string }> {
  const child = fork(path.join(here, compiled ? file.replace(/\.ts$/, '.js') : file), [], {
    execArgv: [...(compiled ? [] : ['--import', 'tsx']), ...extraExecArgv],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  servers.add(child);
  return new Promise((resolve, reject) => {
    child.once('message', (m: { port: number; floorPort?: number; key?: string }) => {
      pin(child.pid!, serverCpu);
      resolve({ child, ...m });
    });
    child.once('exit', (c) => reject(new Error(`${file} exited ${c}`)));
  });
}

interface Target {
  name: string;
  opts: autocannon.Options;
  server: ChildProcess;
}

/** CPU time (user + system, microseconds) the server process has used so far. */
function cpuOf(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    const on = (m: { cpu?: NodeJS.CpuUsage }) => {
      if (!m.cpu) return;
      child.off('message', on);
      resolve(m.cpu.user + m.cpu.system);
    };
    child.on('message', on);
    child.send('cpu');
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const db = await createTestDatabase('stt_bench');
const bare = await start('bareKoa.ts');
const api = await start(
  'apiServer.ts',
  {
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    GATEWAY_SESSION_TOKEN_SECRET: 'bench-secret-value',
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
    PLANS_JSON: JSON.stringify({ bench: { maxRequestsPerMinute: 1_000_000_000 } }),
    // 0 turns the poll limit off (to see its share); by default it is on, never reached.
    POLL_REQUESTS_PER_MINUTE: process.env.POLL_REQUESTS_PER_MINUTE ?? '1000000000',
  },
  profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [],
);
const pinned = pin(process.pid, clientCpu) && serverCpu >= 0;
const auth = { authorization: `Bearer ${api.key}` };
const targets: Target[] = [
  { name: 'bare Koa hello-world', opts: { url: `http://127.0.0.1:${bare.port}/` }, server: bare.child },
  {
    name: 'GET plan catalog (public)',
    opts: { url: `http://127.0.0.1:${api.port}/v1/external-transcription/plans` },
    server: api.child,
  },
  {
    name: 'POST session-token (auth + Redis limit + HMAC)',
    opts: {
      url: `http://127.0.0.1:${api.port}/v1/audio/transcriptions/session-token`,
      method: 'POST',
      headers: auth,
    },
    server: api.child,
  },
];
// A poll-shaped authenticated GET: submit one job, then poll it (auth + Postgres read; polls do not count against the request rate, see docs/decisions.md).
const submitted = await fetch(`http://127.0.0.1:${api.port}/v1/audio/transcriptions/jobs`, {
  method: 'POST',
  headers: { ...auth, 'content-type': 'application/json' },
  body: JSON.stringify({ audio_url: 'https://audio.invalid/bench.wav' }),
});
const job = (await submitted.json()) as { workflow_id?: string };
if (job.workflow_id) {
  targets.push({
    name: 'GET job poll (auth + Redis poll limit + Postgres read)',
    opts: {
      url: `http://127.0.0.1:${api.port}/v1/audio/transcriptions/jobs/${job.workflow_id}`,
      headers: auth,
    },
    server: api.child,
  });
  // The same poll with nothing around it (pollFloor.ts): the most any route through the public request path can reach here.
  targets.push({
    name: 'poll floor (Koa + auth + Redis poll limit + Postgres read only)',
    opts: {
      url: `http://127.0.0.1:${api.floorPort}/v1/audio/transcriptions/jobs/${job.workflow_id}`,
      headers: auth,
    },
    server: api.child,
  });
} else {
  process.stderr.write(`could not submit a job for the poll target: ${JSON.stringify(job)}\n`);
}

// `--only TEXT` keeps bare Koa and the targets whose name contains TEXT (e.g. `--only poll` for a profile of one route).
const onlyIndex = process.argv.indexOf('--only');
if (onlyIndex > 0) {
  const only = process.argv[onlyIndex + 1];
  for (let i = targets.length - 1; i > 0; i--) if (!targets[i].name.includes(only)) targets.splice(i, 1);
}

for (const t of targets) await autocannon({ ...t.opts, connections, duration: warmup, pipelining: 1 });

const results = new Map<
  string,
  {
    rps: number[];
    p50: number[];
    p99: number[];
    cpuUs: number[];
    instr: number[];
    errors: number;
    non2xx: number;
  }
>();
for (let r = 0; r < rounds; r++) {
  for (const t of targets) {
    const cpu0 = await cpuOf(t.server);
    const { result: res, instructions } = await instructionsDuring(
      t.server.pid!,
      () => autocannon({ ...t.opts, connections, duration, pipelining: 1 }),
      usePerf,
    );
    const cpuUs = (await cpuOf(t.server)) - cpu0;
    const e = results.get(t.name) ?? {
      rps: [],
      p50: [],
      p99: [],
      cpuUs: [],
      instr: [],
      errors: 0,
      non2xx: 0,
    };
    e.cpuUs.push(cpuUs / Math.max(1, res.requests.total));
    e.instr.push(instructions / Math.max(1, res.requests.total));
    e.rps.push(res.requests.average);
    e.p50.push(res.latency.p50);
    e.p99.push(res.latency.p99);
    e.errors += res.errors + res.timeouts;
    e.non2xx += res.non2xx;
    results.set(t.name, e);
    process.stderr.write(
      `round ${r + 1} ${t.name}: ${Math.round(res.requests.average)} req/s p99 ${res.latency.p99} ms\n`,
    );
  }
}

const baseline = median(results.get(targets[0].name)!.rps);
const baseCpu = median(results.get(targets[0].name)!.cpuUs);
const baseInstr = median(results.get(targets[0].name)!.instr);
const placement = pinned
  ? `servers pinned to CPU ${serverCpu}, load generator to CPU ${clientCpu}`
  : 'not pinned';
console.log(
  `\nAPI benchmark: ${connections} connections, ${duration} s x ${rounds} rounds after ${warmup} s warm-up, medians (Redis limits on, LOG_LEVEL=${process.env.LOG_LEVEL ?? 'info'}, ACCESS_LOG_SAMPLE=${process.env.ACCESS_LOG_SAMPLE ?? 1}; ${placement}; load average ${os.loadavg()[0].toFixed(1)})\n`,
);
const perfHead = usePerf ? ' server k-instructions/req | instruction ratio vs bare Koa |' : '';
console.log(
  `| target | req/s | vs bare Koa | p50 ms | p99 ms | server CPU µs/req | CPU-bound ratio vs bare Koa |${perfHead} errors | non-2xx |`,
);
console.log(`|---|---|---|---|---|---|---|${usePerf ? '---|---|' : ''}---|---|`);
for (const [name, e] of results) {
  const rps = median(e.rps);
  const cpu = median(e.cpuUs);
  const instr = median(e.instr);
  const perfCols = usePerf
    ? ` ${(instr / 1000).toFixed(0)} | ${((baseInstr / instr) * 100).toFixed(0)}% |`
    : '';
  console.log(
    `| ${name} | ${Math.round(rps)} | ${((rps / baseline) * 100).toFixed(0)}% | ${median(e.p50)} | ${median(e.p99)} | ${cpu.toFixed(1)} | ${((baseCpu / cpu) * 100).toFixed(0)}% |${perfCols} ${e.errors} | ${e.non2xx} |`,
  );
}

api.child.send('stop');
await new Promise((r) => api.child.once('exit', r));
bare.child.kill();
await db.drop();
process.exit(0);
