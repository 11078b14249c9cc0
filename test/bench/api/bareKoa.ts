/**
 * Baseline for the API benchmark: a bare Koa hello-world answering JSON.
 * `BARE_WORK_US` (work.ts) adds that many microseconds of busy work to each
 * request, to see what a fixed amount of work costs in this benchmark.
 */
import Koa from 'koa';
import { performance } from 'node:perf_hooks';

const workMs = Number(process.env.BARE_WORK_US ?? 0) / 1000;
const app = new Koa();
app.use((ctx) => {
  if (workMs > 0) {
    const until = performance.now() + workMs;
    while (performance.now() < until);
  }
  ctx.body = { ok: true, service: 'hello' };
});
const server = app.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  process.send?.({ port: (server.address() as { port: number }).port });
});
process.on('message', (m) => {
  if (m === 'cpu') process.send?.({ cpu: process.cpuUsage() });
});
