import autocannon from 'autocannon';
import { fork } from 'node:child_process';
import os from 'node:os';
import Koa from 'koa';
import Router from '@koa/router';
const variant = process.argv[2];
const parts0 = (v: string) => v.split('+');
if (variant) {
  const { createLogger } = await import('../../../shared/logger.js');
  const { requestContext } = await import('../../../api/http/requestContext.js');
  const { errorHandler } = await import('../../../api/http/errors.js');
  const logger = createLogger({ level: parts0(variant).includes('quiet') ? 'warn' : 'info' });
  const app = new Koa();
  const parts = variant.split('+');
  if (parts.includes('ctx')) app.use(requestContext(logger));
  if (parts.includes('err')) app.use(errorHandler());
  const handler = (ctx: Koa.Context) => { ctx.body = { ok: true, service: 'x' }; };
  if (parts.includes('pino')) app.use(async (ctx, next) => { await next(); logger.info({ method: ctx.method, path: ctx.path, status: ctx.status }, 'request'); });
  if (parts.includes('router')) { const r = new Router(); r.get('/health', handler); app.use(r.routes()); app.use(r.allowedMethods()); }
  else app.use(handler);
  const s = app.listen(0, '127.0.0.1', () => process.send!({ port: (s.address() as any).port }));
  process.on('message', (m) => m === 'cpu' && process.send!({ cpu: process.cpuUsage() }));
} else {
  // Servers on CPU 0, the load generator (this process) on CPU 1, as in run.ts.
  const { pinToCpu } = await import('./pin.js');
  const pin = (pid: number, cpu: number) => os.availableParallelism() >= 2 && pinToCpu(pid, cpu);
  pin(process.pid, 1);
  const vs = ['bare', 'ctx', 'ctx+quiet', 'pino', 'ctx+err+router'];
  const acc: Record<string, number[]> = {};
  for (let round = 0; round < 3; round++) for (const v of vs) {
    const c = fork(new URL(import.meta.url).pathname, [v], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
    const m: any = await new Promise((r) => c.once('message', r));
    pin(c.pid!, 0);
    const cpu = () => new Promise<number>((r) => { c.once('message', (x: any) => r(x.cpu.user + x.cpu.system)); c.send('cpu'); });
    await autocannon({ url: `http://127.0.0.1:${m.port}/health`, connections: 50, duration: 1 });
    const c0 = await cpu();
    const res = await autocannon({ url: `http://127.0.0.1:${m.port}/health`, connections: 50, duration: 3 });
    (acc[v] ??= []).push(((await cpu()) - c0) / res.requests.total);
    c.kill();
  }
  for (const v of vs) console.log(v, acc[v].map((x) => x.toFixed(1)).join(' '));
}
