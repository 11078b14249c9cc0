/**
 * Runs the API: builds the dependencies, migrates (under a lock), listens,
 * and shuts down gracefully — stop accepting, let requests in flight finish
 * (up to SHUTDOWN_GRACE_MS), then close pools.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { migrateLatest } from '../shared/db/index.js';
import { attachRealtimeProxy } from './realtime/proxy.js';
import { startBatch, stopBatch } from './batch/runtime.js';
import { createApp } from './app.js';
import { type AppDeps, closeDeps, createDeps } from './deps.js';

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
  const app = createApp(deps);
  await startBatch(deps, { workers: config.batch.workersEnabled });
  deps.closers.push(() => stopBatch(deps));
  const server = http.createServer(app.callback());
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.http.port, config.http.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port, host: config.http.host }, 'api listening');
  const detachProxy = proxyRealtime(server, deps);

  // Readiness turns 503 as the stop begins (the load balancer's check: GET /readyz/instance).
  let draining = false;
  deps.readiness.push({ name: 'accepting', check: async () => !draining });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      draining = true;
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

/**
 * With `realtime.upstreamProxyTarget` (host:port; the embedded start sets it), the API also serves the realtime
 * stream on its own base URL by splicing upgrades through to the realtime
 * process (and /readyz checks that process's /readyz). The embedded start uses
 * this; a scaled deployment routes the stream path at its load balancer.
 */
function proxyRealtime(server: http.Server, deps: AppDeps): () => void {
  const target = deps.config.realtime.upstreamProxyTarget;
  if (!target) return () => {};
  const sep = target.lastIndexOf(':');
  const host = sep > 0 ? target.slice(0, sep) : '127.0.0.1';
  const port = Number(target.slice(sep + 1));
  return attachRealtimeProxy(server, {
    host,
    port,
    retryAfterSeconds: deps.config.failure.realtimeRetryAfterSeconds,
  });
}
