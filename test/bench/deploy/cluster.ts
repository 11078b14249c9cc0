/**
 * The scaled deployment under load, through its load balancer: `npm run
 * cluster`'s topology (2 API, 2 engine processes of one decoder thread each,
 * 2 realtime processes decoding with the built-in engine's streaming form,
 * HAProxy) on this machine. Bounded: about 6-8 minutes with the defaults.
 *
 *   npx tsx test/bench/deploy/cluster.ts [--steps 1,2,4,6,8,10] [--seconds 20] [--trials 3] [--carried N]
 *
 * Lines: connected/clients, refused handshakes, utterances completed/cut by
 * the server (the rest were still pending 10 s after the clients stopped
 * sending), failed utterances by code, completion percentiles, close codes.
 *
 * 1. Capacity: N concurrent real-time streams of real speech (the Node load
 *    generator), N rising, on instances without admission limits and with a
 *    streaming decoder for every session: the largest N with 0 failed
 *    utterances, every utterance decoded while spoken, and a completion p99
 *    (speech_stopped -> completed) under 3 s.
 * 2. The k6 realtime script (Node runner) at the carried load through the
 *    load balancer: its thresholds and figures.
 *    (--carried N skips the search of 1 and takes N as the carried load.)
 * 3. Overload on the cluster's own defaults (scripts/cluster REALTIME_ENV,
 *    the same as docker/compose.yaml): twice the carried load, and at least
 *    twice what the defaults admit, so that refusals show: refusals (503 +
 *    Retry-After), not closes of open sessions; the accepted sessions'
 *    utterances and p99. Steps 2-4 share one cluster on the defaults.
 * 4. Failover: SIGKILL a realtime (then an API) instance and measure how long
 *    until a new connection (request) through the load balancer succeeds,
 *    and how many attempts failed meanwhile; median of --trials.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import request from 'supertest';
import { connect, bearer, repoRoot } from '../../realtime/helpers.js';
import { runK6Script } from '../../load/k6/node-runner.js';
import { runLoad, type LoadResult } from '../../load/realtime-load.js';
import { ADMIN_TOKEN, counterSum, deployCluster, type DeployedCluster } from '../../deploy/helpers.js';
import { REALTIME_ENV } from '../../../scripts/cluster/index.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '1,2,4,6,8,10' },
    seconds: { type: 'string', default: '20' },
    trials: { type: 'string', default: '3' },
    carried: { type: 'string' },
  },
});
const steps = values.steps.split(',').map(Number);
const seconds = Number(values.seconds);
const trials = Number(values.trials);
// Room for every bench client in one key (the limits under test are the instances', not the plan's).
const PLANS_JSON = JSON.stringify({ pro: { maxConcurrentConnections: 500, maxConnectionsPerMinute: 5000 } });

const cores = os.availableParallelism();
const realtimes = (d: DeployedCluster) =>
  [...d.cluster.processes.values()].filter((p) => p.role === 'realtime').length;
const cpuPerStream: number[] = [];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function proKey(d: DeployedCluster): Promise<string> {
  const res = await request(d.cluster.url)
    .post('/v1/external-transcription/keys')
    .set('authorization', `Bearer ${ADMIN_TOKEN}`)
    .send({ owner_id: 'bench', plan: 'pro' });
  return res.body.data.key as string;
}

async function load(d: DeployedCluster, clients: number): Promise<LoadResult> {
  const key = await proKey(d);
  return runLoad({
    url: d.cluster.wsUrl,
    headers: bearer(key).headers,
    clients,
    seconds,
    rampMs: 1000,
  });
}

function line(label: string, r: LoadResult): string {
  const closes = Object.entries(r.closes)
    .map(([k, v]) => `${k}:${v}`)
    .join(' ');
  const errors = Object.entries(r.errors)
    .map(([k, v]) => `${k}:${v}`)
    .join(' ');
  return (
    `${label.padEnd(12)} connected ${r.connected}/${r.clients}  refused ${r.failedConnects}  ` +
    `utterances ${r.utterances}/${r.stopped}  failed ${r.failedUtterances}${errors ? ` {${errors}}` : ''}  ` +
    `completion p50 ${r.completionMs.p50} ms ` +
    `p99 ${r.completionMs.p99} ms  closes {${closes}}`
  );
}

interface Streaming {
  fallbacks: number;
  rssMiB: number[];
  /** Proportional set size: pages shared with other processes (Node's code, ONNX Runtime) or mapped more than once (each decoder maps the acoustic model's mdef) counted once. */
  pssMiB: number[];
  /** CPU seconds (user + system, every thread) of the realtime instances so far. */
  cpuSeconds: number;
}

/**
 * Utterances the realtime instances decoded in the clip form (no free
 * streaming decoder: the built-in engine's transcribe() is the only path that
 * counts stt_speech_requests_total; the streaming form does not), and each
 * realtime instance's RSS.
 */
async function streaming(d: DeployedCluster): Promise<Streaming> {
  let fallbacks = 0;
  let cpuSeconds = 0;
  const rssMiB: number[] = [];
  const pssMiB: number[] = [];
  for (const p of d.cluster.processes.values()) {
    if (p.role !== 'realtime') continue;
    const text = await fetch(`${p.url}/metrics`).then((r) => r.text());
    fallbacks += counterSum(text, 'stt_speech_requests_total');
    const stats = (await fetch(`${p.url}/stats`).then((r) => r.json())) as {
      memory: { rss: number };
      cpu: { user: number; system: number };
    };
    rssMiB.push(Math.round(stats.memory.rss / 2 ** 20));
    const rollup = fs.readFileSync(`/proc/${p.child.pid}/smaps_rollup`, 'utf8');
    pssMiB.push(Math.round(Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN) / 1024));
    cpuSeconds += (stats.cpu.user + stats.cpu.system) / 1e6;
  }
  return { fallbacks, rssMiB, pssMiB, cpuSeconds };
}

async function capacity(): Promise<number> {
  const most = Math.max(...steps);
  // Only the CPU limits here: no admission limit, a streaming decoder for every session.
  const d = await deployCluster({
    env: {
      LOG_LEVEL: 'warn',
      PLANS_JSON,
      REALTIME_MAX_SESSIONS: '0',
      REALTIME_MAX_QUEUED_UTTERANCES: '0',
      STT_STREAM_DECODERS: String(Math.ceil(most / 2)),
    },
  });
  let best = 0;
  try {
    console.log(`capacity through the load balancer (${seconds} s per step, ${cores} cores)`);
    for (const n of steps) {
      const before = await streaming(d);
      const started = Date.now();
      const r = await load(d, n);
      const after = await streaming(d);
      const fallbacks = after.fallbacks - before.fallbacks;
      // Cores the realtime tier spent per stream: CPU time / (streams x wall time). Contention on a
      // shared machine moves latencies far more than this.
      const corePerStream = (after.cpuSeconds - before.cpuSeconds) / (n * ((Date.now() - started) / 1000));
      cpuPerStream.push(corePerStream);
      console.log(
        `${line(`${n} streams`, r)}  clip fallbacks ${fallbacks}  realtime RSS ${after.rssMiB.join('/')} MiB (PSS ${after.pssMiB.join('/')})  ` +
          `realtime CPU per stream ${(corePerStream * 100).toFixed(1)} % of a core`,
      );
      const ok =
        r.failedUtterances === 0 &&
        r.completionMs.p99 < 3000 &&
        r.connected === n &&
        fallbacks === 0 &&
        // Every utterance the server cut was answered before the clients left.
        r.utterances === r.stopped;
      if (!ok) break;
      best = n;
    }
  } finally {
    await d.close();
  }
  console.log(
    `max streams with 0 failed utterances and p99 < 3 s: ${best} (${(best / cores).toFixed(1)} per core)`,
  );
  const cost = median(cpuPerStream);
  console.log(
    `realtime CPU per stream, median of the steps: ${(cost * 100).toFixed(1)} % of a core ` +
      `(${(1 / cost).toFixed(1)} streams per core of decoding at full use)`,
  );
  return best;
}

async function overload(d: DeployedCluster, n: number): Promise<void> {
  const limits = ['STT_STREAM_DECODERS', 'REALTIME_MAX_SESSIONS', 'REALTIME_MAX_QUEUED_UTTERANCES']
    .map((k) => `${k}=${REALTIME_ENV[k]}`)
    .join(' ');
  // Twice the carried load; at least twice what the defaults admit, so that refusals show.
  const admitted = Number(REALTIME_ENV.REALTIME_MAX_SESSIONS) * realtimes(d);
  const streams = 2 * Math.max(n, admitted);
  console.log(
    `\noverload: ${streams} streams (carried ${n}, the defaults admit ${admitted}: ${limits} per instance)`,
  );
  const r = await load(d, streams);
  const closedByServer = Object.entries(r.closes)
    .filter(([k]) => !k.startsWith('1000') && !k.startsWith('http_'))
    .reduce((a, [, v]) => a + v, 0);
  console.log(line(`${streams} streams`, r));
  console.log(
    `refused ${r.failedConnects} (${
      Object.keys(r.closes)
        .filter((k) => k.startsWith('http_'))
        .join(' ') || 'none'
    }), ` + `open sessions closed by the server ${closedByServer}, failed utterances ${r.failedUtterances}`,
  );
}

/** Milliseconds from the kill until `attempt` succeeds, and the attempts that failed before. */
async function until(attempt: () => Promise<boolean>): Promise<{ ms: number; failed: number }> {
  const t0 = Date.now();
  let failed = 0;
  while (Date.now() - t0 < 30_000) {
    if (await attempt()) return { ms: Date.now() - t0, failed };
    failed++;
    await new Promise((r) => setTimeout(r, 20));
  }
  return { ms: Infinity, failed };
}

async function failover(d: DeployedCluster): Promise<void> {
  const c = d.cluster;
  const key = await proKey(d);
  const session = async () => {
    try {
      const s = await connect(c.wsUrl, bearer(key));
      await s.next('session.created', 5000);
      s.ws.close(1000);
      return true;
    } catch {
      return false;
    }
  };
  const plans = async () =>
    (
      await request(c.url)
        .get('/v1/external-transcription/plans')
        .catch(() => ({ status: 0 }))
    ).status === 200;
  console.log(`\nfailover (${trials} trials each): time from SIGKILL to the next success through the LB`);
  for (const [role, attempt] of [
    ['realtime', session],
    ['api', plans],
  ] as const) {
    const times: number[] = [];
    const failures: number[] = [];
    for (let i = 0; i < trials; i++) {
      const name = `${role}${(i % 2) + 1}`;
      const p = c.processes.get(name)!;
      p.child.kill('SIGKILL');
      await p.exited;
      const r = await until(attempt);
      times.push(r.ms);
      failures.push(r.failed);
      // And it keeps working: 20 more in a row.
      let later = 0;
      for (let j = 0; j < 20; j++) if (!(await attempt())) later++;
      console.log(
        `  ${role} ${name} killed: first success after ${r.ms} ms, ${r.failed} failed before, ${later}/20 failed after`,
      );
      await c.start(name);
    }
    console.log(
      `${role}: median ${median(times)} ms to the next success, median ${median(failures)} failed attempts`,
    );
  }
}

async function k6(d: DeployedCluster, n: number): Promise<void> {
  console.log(`\nk6 realtime script (Node runner) through the load balancer: ${n} VUs, ${seconds} s`);
  const r = await runK6Script(path.join(repoRoot, 'test/load/k6/realtime.js'), {
    URL: d.cluster.wsUrl,
    KEY: await proKey(d),
    VUS: String(n),
    DURATION_S: String(seconds),
  });
  const m = (name: string, stat = 'count') => r.metrics[name]?.[stat] ?? 0;
  console.log(
    `  connects ${m('rt_connect_ms')}  connect p99 ${Math.round(m('rt_connect_ms', 'p(99)'))} ms  ` +
      `utterances ${m('rt_utterances')}  failed ${m('rt_failed_utterances')}  completion p50 ` +
      `${Math.round(m('rt_completion_ms', 'med'))} ms p99 ${Math.round(m('rt_completion_ms', 'p(99)'))} ms  ` +
      `refused ${m('rt_refused_connects')}  1013 closes ${m('rt_close_1013')}  server closes ${m('rt_server_closes')}`,
  );
  for (const t of r.thresholds)
    console.log(`  ${t.ok ? 'pass' : 'FAIL'} ${t.metric} ${t.expression} (${Math.round(t.value)})`);
}

const t0 = Date.now();
const n = values.carried ? Number(values.carried) : await capacity();
// One cluster on the defaults of `npm run cluster` for the rest (failover last: it kills instances).
const d = await deployCluster({ env: { LOG_LEVEL: 'warn', PLANS_JSON } });
try {
  // k6 before the overload: decoders that fell behind under it take a while to catch up.
  await k6(d, Math.max(1, n));
  await overload(d, n);
  await failover(d);
} finally {
  await d.close();
}
console.log(`\ndone in ${Math.round((Date.now() - t0) / 1000)} s`);
process.exit(0);
