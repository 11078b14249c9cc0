/**
 * Cost of the API's per-request metrics, side by side in one run: the
 * table behind stt_http_* (api/http/metrics.ts) against prom-client's own
 * Counter + Histogram doing the same counting, over a mix of routes and
 * statuses. Prints nanoseconds per request, median of the rounds.
 *
 * Usage: npx tsx test/bench/api/metrics.ts [requests=2000000] [rounds=5]
 */
import client from 'prom-client';
import type { Context } from 'koa';
import { observeRequest } from '../../../api/http/metrics.js';
import { LATENCY_BUCKETS } from '../../../shared/metrics/index.js';

const n = Number(process.argv[2] ?? 2_000_000);
const rounds = Number(process.argv[3] ?? 5);
const registry = new client.Registry();
const counter = new client.Counter({
  name: 'bench_requests_total',
  help: 'x',
  labelNames: ['method', 'route', 'status'],
  registers: [registry],
});
const hist = new client.Histogram({
  name: 'bench_duration_seconds',
  help: 'x',
  buckets: LATENCY_BUCKETS,
  labelNames: ['method', 'route'],
  registers: [registry],
});

const routes = ['/v1/external-transcription/plans', '/v1/audio/transcriptions/jobs/:workflowId', 'unmatched'];
const ctxs = routes.map(
  (r) => ({ method: 'GET', _matchedRoute: r === 'unmatched' ? undefined : r }) as unknown as Context,
);
const statuses = [200, 200, 200, 404, 429];

function table(): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) observeRequest(ctxs[i % 3]!, statuses[i % 5]!, (i % 97) / 10_000);
  return Number(process.hrtime.bigint() - t0) / n;
}

function promClient(): number {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const c = ctxs[i % 3]! as unknown as { method: string; _matchedRoute?: string };
    const route = c._matchedRoute ?? 'unmatched';
    counter.inc({ method: c.method, route, status: String(statuses[i % 5]) });
    hist.observe({ method: c.method, route }, (i % 97) / 10_000);
  }
  return Number(process.hrtime.bigint() - t0) / n;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const a: number[] = [];
const b: number[] = [];
table();
promClient(); // warm-up
for (let r = 0; r < rounds; r++) {
  a.push(table());
  b.push(promClient());
}
console.log(`requests per round: ${n}, rounds: ${rounds} (alternating)`);
console.log(
  `table (api/http/metrics.ts):      ${median(a).toFixed(0)} ns/request  [${a.map((x) => x.toFixed(0)).join(', ')}]`,
);
console.log(
  `prom-client Counter + Histogram:  ${median(b).toFixed(0)} ns/request  [${b.map((x) => x.toFixed(0)).join(', ')}]`,
);
console.log(`ratio prom-client / table: ${(median(b) / median(a)).toFixed(1)}x`);
