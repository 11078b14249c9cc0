/**
 * Where the session-token route's cost goes: the route's middleware chain
 * built up one layer at a time, each step a server of its own answering the
 * same POST, measured with autocannon like run.ts (servers pinned to CPU 0,
 * load generator to CPU 1). For each step: server CPU µs per request and,
 * with perf available, server instructions per request (user + kernel),
 * which a busy shared machine disturbs far less than time.
 *
 *   npm run build && node dist/test/bench/api/breakdown.js [--duration 5] [--rounds 3] [--no-perf]
 *
 * Steps (each adds to the one before):
 *   bare     Koa answering a token-shaped JSON body
 *   reqid    request id in and out (api/http/requestContext.ts, access log off)
 *   log      the access line (LOG_LEVEL=info, to stdout like production)
 *   errors   the plane-aware error handler
 *   router   @koa/router with the exact-path index, route plane
 *   auth     API key authentication (cached key store lookup)
 *   limit    Redis request rate limit, X-RateLimit-* headers
 *   token    the real handler: HMAC-signed session token, Cache-Control
 */
import autocannon from 'autocannon';
import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import Koa from 'koa';
import Router from '@koa/router';

const STEPS = ['bare', 'reqid', 'log', 'errors', 'router', 'auth', 'limit', 'token'] as const;
const PATH = '/v1/audio/transcriptions/session-token';
const step = STEPS.find((s) => s === process.argv[2]);

if (step) {
  // One server: the chain up to `step`.
  const upTo = (s: (typeof STEPS)[number]) => STEPS.indexOf(step) >= STEPS.indexOf(s);
  const { loadConfig } = await import('../../../shared/config/index.js');
  const { createLogger } = await import('../../../shared/logger.js');
  const { createDeps } = await import('../../../api/deps.js');
  const { requestContext } = await import('../../../api/http/requestContext.js');
  const { errorHandler, usePlane } = await import('../../../api/http/errors.js');
  const { requireApiKey } = await import('../../../api/http/auth.js');
  const { requestRateLimit } = await import('../../../api/http/rateLimit.js');
  const config = loadConfig({ ...process.env, PORT: '0', HOST: '127.0.0.1' });
  const logger = createLogger({ level: upTo('log') ? 'info' : 'warn', name: 'api' });
  const deps = createDeps(config, logger);
  const { key } = await deps.keys.issue({ ownerId: 'bench', plan: 'bench' });
  const shaped = {
    token: `rt_${'x'.repeat(150)}.${'y'.repeat(43)}`,
    expires_in: 60,
    endpoint: '/v1/audio/transcriptions/stream',
  };
  const handler: Koa.Middleware = upTo('token')
    ? (ctx) => {
        const issued = deps.auth.issueSessionToken(ctx.state.principal);
        if ('ok' in issued) throw new Error(issued.message);
        ctx.res.setHeader('Cache-Control', 'no-store');
        ctx.body = {
          token: issued.token,
          expires_in: issued.expires_in,
          endpoint: '/v1/audio/transcriptions/stream',
        };
      }
    : (ctx) => {
        ctx.body = shaped;
      };
  const app = new Koa();
  app.silent = true;
  if (upTo('reqid')) app.use(requestContext(logger));
  if (upTo('errors')) app.use(errorHandler());
  if (upTo('router')) {
    const chain: Koa.Middleware[] = [usePlane('api')];
    if (upTo('auth')) chain.push(requireApiKey(deps.auth));
    if (upTo('limit')) chain.push(requestRateLimit(deps.limits));
    const router = new Router();
    router.post(PATH, ...chain, handler);
    app.use(router.routes());
    app.use(router.allowedMethods({ throw: false }) as unknown as Koa.Middleware);
  } else {
    app.use(handler);
  }
  const server = app.listen(0, '127.0.0.1', () =>
    process.send!({ port: (server.address() as { port: number }).port, key }),
  );
  process.on('message', (m) => m === 'cpu' && process.send!({ cpu: process.cpuUsage() }));
} else {
  const { createTestDatabase, TEST_REDIS_URL } = await import('../../helpers/db.js');
  const { instructionsDuring, pinToCpu } = await import('./measure.js');
  const arg = (name: string, def: number) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : def;
  };
  const duration = arg('duration', 5);
  const rounds = arg('rounds', 3);
  const usePerf = !process.argv.includes('--no-perf');
  // Servers on CPU 0, the load generator (this process) on CPU 1, as in run.ts.
  const pin = (pid: number, cpu: number) => os.availableParallelism() >= 2 && pinToCpu(pid, cpu);
  pin(process.pid, 1);
  const db = await createTestDatabase('stt_breakdown');
  const env = {
    ...process.env,
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    GATEWAY_SESSION_TOKEN_SECRET: 'bench-secret-value',
    PLANS_JSON: JSON.stringify({ bench: { maxRequestsPerMinute: 1_000_000_000 } }),
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const cpuUs: Record<string, number[]> = {};
  const instr: Record<string, number[]> = {};
  for (let round = 0; round < rounds; round++) {
    for (const s of STEPS) {
      const child: ChildProcess = fork(new URL(import.meta.url).pathname, [s], {
        env,
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      });
      const m = await new Promise<{ port: number; key: string }>((r) => child.once('message', r));
      pin(child.pid!, 0);
      const cpu = () =>
        new Promise<number>((r) => {
          child.once('message', (x: { cpu: NodeJS.CpuUsage }) => r(x.cpu.user + x.cpu.system));
          child.send('cpu');
        });
      const opts = {
        url: `http://127.0.0.1:${m.port}${PATH}`,
        method: 'POST' as const,
        headers: { authorization: `Bearer ${m.key}` },
        connections: 50,
      };
      await autocannon({ ...opts, duration: 2 }); // warm-up
      const c0 = await cpu();
      const { result, instructions } = await instructionsDuring(
        child.pid!,
        () => autocannon({ ...opts, duration }),
        usePerf,
      );
      const n = Math.max(1, result.requests.total);
      (cpuUs[s] ??= []).push(((await cpu()) - c0) / n);
      (instr[s] ??= []).push(instructions / n);
      if (result.non2xx || result.errors)
        process.stderr.write(`${s}: ${result.non2xx} non-2xx, ${result.errors} errors\n`);
      child.kill();
      await new Promise((r) => child.once('exit', r));
    }
  }
  console.log(
    `\nSession-token chain, layer by layer: medians of ${rounds} rounds of ${duration} s, 50 connections (load average ${os.loadavg()[0].toFixed(1)})\n`,
  );
  console.log('| step | server CPU µs/req | server k-instructions/req | added by this step |');
  console.log('|---|---|---|---|');
  let prev = NaN;
  for (const s of STEPS) {
    const k = median(instr[s]) / 1000;
    console.log(
      `| ${s} | ${median(cpuUs[s]).toFixed(1)} | ${k.toFixed(0)} | ${Number.isNaN(prev) ? '' : `${(k - prev).toFixed(0)}k`} |`,
    );
    prev = k;
  }
  await db.drop();
  process.exit(0);
}
