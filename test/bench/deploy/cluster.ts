/**
 * The scaled deployment under load, through its load balancer: `npm run
 * cluster`'s topology (2 API, 2 realtime, 2 engine processes of one decoder
 * thread each, HAProxy) on this machine.
 *
 *   npx tsx test/bench/deploy/cluster.ts [--steps 2,4,6,8,10,12] [--seconds 20] [--trials 3]
 *
 * 1. Capacity: N concurrent real-time streams of real speech (the Node load
 *    generator), N rising: the largest N with 0 failed utterances and a
 *    completion p99 (speech_stopped -> completed) under 3 s.
 * 2. Twice that load on a cluster whose instances are limited to what it
 *    carries (REALTIME_MAX_SESSIONS = N/2 each): refusals (503 + Retry-After),
 *    not closes of open sessions; the accepted sessions' p99.
 * 3. Failover: SIGKILL a realtime (then an API) instance and measure how long
 *    until a new connection (request) through the load balancer succeeds,
 *    and how many attempts failed meanwhile; median of --trials.
 */
import { parseArgs } from 'node:util';
import request from 'supertest';
import { connect, bearer } from '../../realtime/helpers.js';
import { runLoad, type LoadResult } from '../../load/realtime-load.js';
import { ADMIN_TOKEN, deployCluster, type DeployedCluster } from '../../deploy/helpers.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '2,4,6,8,10,12' },
    seconds: { type: 'string', default: '20' },
    trials: { type: 'string', default: '3' },
  },
});
const steps = values.steps.split(',').map(Number);
const seconds = Number(values.seconds);
const trials = Number(values.trials);
// Room for every bench client in one key (the limits under test are the instances', not the plan's).
const PLANS_JSON = JSON.stringify({ pro: { maxConcurrentConnections: 500, maxConnectionsPerMinute: 5000 } });

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
  return (
    `${label.padEnd(12)} connected ${r.connected}/${r.clients}  refused ${r.failedConnects}  ` +
    `utterances ${r.utterances}  failed ${r.failedUtterances}  completion p50 ${r.completionMs.p50} ms ` +
    `p99 ${r.completionMs.p99} ms  closes {${closes}}`
  );
}

async function capacity(): Promise<number> {
  const d = await deployCluster({ env: { LOG_LEVEL: 'warn', PLANS_JSON, REALTIME_MAX_SESSIONS: '0' } });
  let best = 0;
  try {
    console.log(`capacity through the load balancer (${seconds} s per step)`);
    for (const n of steps) {
      const r = await load(d, n);
      console.log(line(`${n} streams`, r));
      const ok = r.failedUtterances === 0 && r.completionMs.p99 < 3000 && r.connected === n;
      if (!ok) break;
      best = n;
    }
  } finally {
    await d.close();
  }
  console.log(`max streams with 0 failed utterances and p99 < 3 s: ${best}`);
  return best;
}

async function overload(n: number): Promise<void> {
  const perInstance = Math.max(1, Math.ceil(n / 2));
  const d = await deployCluster({
    env: { LOG_LEVEL: 'warn', PLANS_JSON, REALTIME_MAX_SESSIONS: String(perInstance) },
  });
  try {
    console.log(`\ntwice the load (${2 * n} streams), REALTIME_MAX_SESSIONS=${perInstance} per instance`);
    console.log(line(`${2 * n} streams`, await load(d, 2 * n)));
  } finally {
    await d.close();
  }
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

async function failover(): Promise<void> {
  const d = await deployCluster({ env: { LOG_LEVEL: 'warn', PLANS_JSON } });
  const c = d.cluster;
  try {
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
  } finally {
    await d.close();
  }
}

const n = await capacity();
if (n > 0) await overload(n);
await failover();
process.exit(0);
