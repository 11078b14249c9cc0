/**
 * Runs the API: builds the dependencies (api/deps.ts, the composition root)
 * unless given them, migrates (under a lock), starts the batch plane,
 * listens, and shuts down gracefully — stop accepting, let requests in
 * flight finish (up to SHUTDOWN_GRACE_MS), then close pools.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { migrateLatest } from '../shared/db/index.js';
import { attachRealtimeProxy } from './realtime/proxy.js';
import { createApp } from './app.js';
import { type AppDeps, closeDeps, createDeps } from './deps.js';
import { HTTP_TIMEOUT_CHECK_MS } from '../shared/config/platform.js';
import { sweepDecodeSpool } from '../shared/transcribe/clip.js';

export interface RunningApi {
  deps: AppDeps;
  server: http.Server;
  port: number;
  /** Graceful stop; resolves when pools are closed. */
  stop(): Promise<void>;
}

export async function startApi(
  config: Config,
  logger: Logger,
  opts: { deps?: AppDeps } = {},
): Promise<RunningApi> {
  const deps = opts.deps ?? createDeps(config, logger);
  if (config.migrateOnStart) {
    const applied = await migrateLatest(deps.db);
    if (applied.length) logger.info({ applied }, 'database migrated');
  }
  await sweepDecodeSpool(logger);
  const app = createApp(deps);
  await deps.batch.start({ workers: config.batch.workersEnabled });
  const handle = app.callback();
  const server = http.createServer(
    { connectionsCheckingInterval: HTTP_TIMEOUT_CHECK_MS },
    (req, res) => void handle(req, res),
  );
  // Idle keep-alive connections outlive a load balancer's idle timeout (so it closes them first);
  // a request head must arrive whole within headersTimeoutMs, from a new connection too.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = config.http.headersTimeoutMs;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.http.port, config.http.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port, host: config.http.host }, 'api listening');
  // With a realtime upstream (embedded start), the stream is served on this base URL too.
  const upstream = deps.realtimeUpstream;
  const detachProxy = upstream ? attachRealtimeProxy(server, upstream) : () => {};

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
      const closed = new Promise<void>((r) => server.close(() => r()));
      // Keep-alive connections go idle as their last response finishes; close them as they do.
      const sweep = setInterval(() => server.closeIdleConnections(), 50);
      server.closeIdleConnections();
      const grace = new Promise<void>((r) => setTimeout(r, config.http.shutdownGraceMs).unref());
      await Promise.race([closed, grace]);
      clearInterval(sweep);
      server.closeAllConnections();
      detachProxy();
      await closeDeps(deps);
      logger.info('api stopped');
    })());
  return { deps, server, port, stop };
}
