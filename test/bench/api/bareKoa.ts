/** Baseline for the API benchmark: a bare Koa hello-world answering JSON. */
import Koa from 'koa';

const app = new Koa();
app.use((ctx) => {
  ctx.body = { ok: true, service: 'hello' };
});
const server = app.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  process.send?.({ port: (server.address() as { port: number }).port });
});
process.on('message', (m) => {
  if (m === 'cpu') process.send?.({ cpu: process.cpuUsage() });
});
