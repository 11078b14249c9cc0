/**
 * Runs the API: builds the dependencies (api/deps.ts, the composition root)
 * unless given them, migrates (under a lock), starts the batch plane,
 * listens, and shuts down gracefully — stop accepting, let requests in
 * flight finish (up to SHUTDOWN_GRACE_MS), then close pools.
 */
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { migrateIfConfigured } from '../shared/db/index.js';
import { assertKeyPlansKnown } from '../shared/platform.js';
import { attachRealtimeProxy } from './realtime/proxy.js';
import { createApp } from './app.js';
import { answerClientError } from './http/clientError.js';
import { type AppDeps, closeDeps, createDeps } from './deps.js';
import { HTTP_TIMEOUT_CHECK_MS } from '../shared/config/platform.js';
import { sweepDecodeSpool } from '../shared/transcribe/clip.js';

export interface RunningApi {
  deps: AppDeps;
  server: http.Server;
  port: number;
  /** The HTTPS listener's port, when `opts.tls` asked for one. */
  httpsPort?: number;
  /** Graceful stop; resolves when pools are closed. */
  stop(): Promise<void>;
}

export async function startApi(
  config: Config,
  logger: Logger,
  opts: {
    deps?: AppDeps;
    /** Also serve the same app (and the realtime splice) over HTTPS on this port (the embedded start). */
    tls?: { cert: Buffer; key: Buffer; port: number };
  } = {},
): Promise<RunningApi> {
  const deps = opts.deps ?? createDeps(config, logger);
  await migrateIfConfigured({ config, db: deps.db, logger });
  await assertKeyPlansKnown(deps);
  await sweepDecodeSpool(logger);
  const app = createApp(deps);
  await deps.batch.start({ workers: config.batch.workersEnabled });
  const handle = app.callback();
  const options = { connectionsCheckingInterval: HTTP_TIMEOUT_CHECK_MS };
  const serve = (req: http.IncomingMessage, res: http.ServerResponse) => void handle(req, res);
  const servers: http.Server[] = [http.createServer(options, serve)];
  if (opts.tls)
    servers.push(https.createServer({ ...options, cert: opts.tls.cert, key: opts.tls.key }, serve));
  const ports: number[] = [];
  const upstream = deps.realtimeUpstream;
  const detachers: (() => void)[] = [];
  for (const [i, s] of servers.entries()) {
    // Idle keep-alive connections outlive a load balancer's idle timeout (so it closes them first);
    // a request head must arrive whole within headersTimeoutMs, from a new connection too.
    s.keepAliveTimeout = 65_000;
    s.headersTimeout = config.http.headersTimeoutMs;
    s.on('clientError', answerClientError);
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(i === 0 ? config.http.port : opts.tls!.port, config.http.host, () => resolve());
    }).catch((err: unknown) => {
      for (const open of servers.slice(0, i)) open.close();
      throw err;
    });
    ports.push((s.address() as AddressInfo).port);
    // With a realtime upstream (embedded start), the stream is served on this base URL too.
    if (upstream) detachers.push(attachRealtimeProxy(s, upstream));
  }
  const [server] = servers;
  const [port, httpsPort] = ports;
  logger.info({ port, httpsPort, host: config.http.host }, 'api listening');
  const detachProxy = () => detachers.forEach((d) => d());

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      // Readiness turns 503 as the stop begins (the load balancer's check: GET /readyz/instance).
      deps.intake.stop();
      if (config.http.drainDelayMs > 0) {
        logger.info({ ms: config.http.drainDelayMs }, 'api draining: not ready, still serving');
        await new Promise((r) => setTimeout(r, config.http.drainDelayMs));
      }
      logger.info('api shutting down: no new connections, finishing requests in flight');
      const closed = Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
      // Keep-alive connections go idle as their last response finishes; close them as they do.
      const idle = () => servers.forEach((s) => s.closeIdleConnections());
      const sweep = setInterval(idle, 50);
      idle();
      const grace = new Promise<void>((r) => setTimeout(r, config.http.shutdownGraceMs).unref());
      await Promise.race([closed, grace]);
      clearInterval(sweep);
      servers.forEach((s) => s.closeAllConnections());
      detachProxy();
      await closeDeps(deps);
      logger.info('api stopped');
    })());
  return { deps, server, port, ...(httpsPort !== undefined && { httpsPort }), stop };
}
