/**
 * The realtime tier on uWebSockets.js: `WS /v1/audio/transcriptions/stream`
 * plus its HTTP endpoints, on one uWS app. This file assembles the parts from
 * the process's dependencies (realtime/main.ts builds those) and listens:
 *
 * - admission.ts: the upgrade checks (who may open a stream);
 * - lifecycle.ts: one session per WebSocket, the housekeeping tick, shutdown;
 * - endpoints.ts: 426, /health, /readyz, /stats, /metrics, 404.
 */
import { performance } from 'node:perf_hooks';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { TemplatedApp, us_listen_socket, WebSocketBehavior } from 'uWebSockets.js';
import type { Config } from '../shared/config/index.js';
import type { Authenticator } from '../shared/auth/index.js';
import type { LimitsDriver } from '../shared/limits/index.js';
import type { SpeechEngine } from '../shared/stt/types.js';
import type { UsageLedger } from '../shared/usage.js';
import type { UsageBudget } from '../shared/usage/budget.js';
import { createVadService, type VadService } from './vad/service.js';
import { OPENAI_REALTIME_PATH, STREAM_PATH } from '../shared/paths.js';
import { loadUws } from './uws.js';
import * as metrics from './metrics.js';
import { GatewayTimings } from './timings.js';
import { CircuitBreaker } from './breaker.js';
import { ConnectionQuota } from './quota.js';
import { UsageMeter } from './metering.js';
import type { RealtimeSession, SessionDeps } from './session.js';
import { admission, type Dialect, type SocketData } from './admission.js';
import { registerEndpoints } from './endpoints.js';
import { SessionLifecycle } from './lifecycle.js';
import { RevocationWatch } from './revocation.js';

export interface RealtimeDeps {
  config: Config;
  logger: Logger;
  db: Knex;
  auth: Authenticator;
  limits: LimitsDriver;
  engine: SpeechEngine;
  /** The usage ledger (its owner, the composition root, starts and closes it). */
  ledger: UsageLedger;
  /** The process's audio budget: sessions reserve at the upgrade and are billed through it. */
  budget: UsageBudget;
}

export interface RunningRealtime {
  port: number;
  breaker: CircuitBreaker;
  sessions: Set<RealtimeSession>;
  quota: ConnectionQuota;
  meter: UsageMeter;
  vad: VadService;
  /** Graceful stop: refuse new upgrades, close sessions (1001), flush usage, release leases. */
  stop(): Promise<void>;
}

export async function startRealtime(
  deps: RealtimeDeps,
  opts: { port?: number; host?: string; vad?: VadService } = {},
): Promise<RunningRealtime> {
  const rt = deps.config.realtime;
  const log = deps.logger.child({ component: 'realtime' });
  const uWS = loadUws({ requireNative: rt.requireNativeUws });
  const breaker = new CircuitBreaker(rt.breaker);
  const quota = new ConnectionQuota(deps.limits, rt, log);
  const vad = opts.vad ?? (await createVadService(rt.vad.threads, rt.vad));
  // Streaming decoders load before the instance listens: loaded on the first session instead, they kept
  // the first sessions after a (rolling) restart waiting seconds for any transcript on a busy machine.
  await deps.engine.startStreaming?.();
  const sessions = new Set<RealtimeSession>();
  const meter = new UsageMeter(deps.ledger, deps.budget, () => sessions, deps.config.ledger.checkpointMs);
  const timings = new GatewayTimings();

  const sessionDeps: SessionDeps = {
    config: rt,
    engine: deps.engine,
    breaker,
    vad,
    logger: log,
    now: () => performance.now(),
    onCompleted: (latencyMs, engineMs) => {
      timings.recordCompletion(latencyMs, engineMs);
      metrics.completionLatency.observe(latencyMs / 1000);
      metrics.gatewayOverhead.observe(Math.max(0, latencyMs - engineMs) / 1000);
    },
    onUtterance: (outcome) => metrics.utterances.inc({ outcome }),
  };
  const lifecycle = new SessionLifecycle(sessions, { rt, session: sessionDeps, quota, meter, log });
  quota.onLost = (leaseId) => {
    for (const s of sessions) if (s.sessionId === leaseId) s.end('slotLost');
  };
  const revocation = new RevocationWatch(sessions, deps.auth, rt.revocationCheckMs, log);
  const serving = () => lifecycle.serving;

  vad.onFailure?.((err) => {
    // Segmentation state is gone: end every session (1011) and stop admitting; /readyz turns 503
    // so the orchestrator replaces this instance.
    log.fatal({ err }, 'VAD thread failed; realtime instance no longer serving');
    lifecycle.stopServing();
    lifecycle.endAll('clientError');
  });

  breaker.onChange((state) => {
    log.warn({ state }, 'speech upstream circuit breaker changed state');
    metrics.breakerOpen.set(state === 'open' ? 1 : 0);
    if (state === 'open') lifecycle.endAll('upstreamUnavailable');
  });

  const upgrade = admission({
    rt,
    auth: deps.auth,
    ledger: deps.ledger,
    budget: deps.budget,
    breaker,
    quota,
    sessions,
    openSessionsOf: (owner) => lifecycle.openSessionsOf(owner),
    serving,
    proxyHops: deps.config.http.trustProxy,
    log,
  });
  const wsRoute = (dialect: Dialect): WebSocketBehavior<SocketData> => ({
    compression: uWS.DISABLED,
    // We check frame sizes ourselves (1009 audio_frame_too_large with an error event); uWS's own cap only
    // stops messages so large that they would be buffered whole before we see them (it drops the connection).
    maxPayloadLength: rt.maxMessageBytes,
    maxBackpressure: rt.clientBackpressureBytes * 4,
    closeOnBackpressureLimit: false,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    upgrade: upgrade(dialect),
    ...lifecycle.handlers(),
  });
  const app = uWS.App();
  app.ws<SocketData>(STREAM_PATH, wsRoute('native'));
  // OpenAI's Realtime protocol for transcription sessions (realtime/openai.ts): same admission, limits, metering.
  app.ws<SocketData>(OPENAI_REALTIME_PATH, wsRoute('openai'));
  registerEndpoints(app, {
    rt,
    metricsPolicy: deps.config.metrics,
    engine: deps.engine,
    limits: deps.limits,
    breaker,
    quota,
    vad,
    timings,
    sessions,
    serving,
    log,
  });

  const host = opts.host ?? rt.host;
  const listenSocket = await new Promise<us_listen_socket>((resolve, reject) => {
    listenExclusive(app, host, opts.port ?? rt.port, (sock) =>
      sock
        ? resolve(sock)
        : reject(new Error(`realtime could not listen on ${host}:${opts.port ?? rt.port} (is it in use?)`)),
    );
  });
  const port = uWS.us_socket_local_port(listenSocket);
  log.info({ port, host, vad: vad.stats().mode }, 'realtime listening');

  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      lifecycle.stopServing();
      revocation.stop();
      uWS.us_listen_socket_close(listenSocket);
      // Usage is written after the sessions have drained.
      await lifecycle.drain();
      timings.close();
      await quota.close();
      await meter.drain();
      if (!opts.vad) await vad.close();
      log.info('realtime stopped');
    })());

  return { port, breaker, sessions, quota, meter, vad, stop };
}

/**
 * Listens with the port to itself. By default uSockets sets SO_REUSEPORT, so a
 * second process on the same port (a stale instance, another program's
 * uWebSockets.js) binds it too and the kernel silently hands it half the new
 * connections; with LIBUS_LISTEN_EXCLUSIVE_PORT that second bind fails
 * instead. The package's typings lack the (host, port, options, cb) form its
 * addon takes, hence the cast.
 */
function listenExclusive(
  app: TemplatedApp,
  host: string,
  port: number,
  cb: (sock: us_listen_socket | false) => void,
): void {
  const LIBUS_LISTEN_EXCLUSIVE_PORT = 1; // uWS.ListenOptions, a type-only enum
  (app.listen as unknown as (h: string, p: number, o: number, c: typeof cb) => TemplatedApp).call(
    app,
    host,
    port,
    LIBUS_LISTEN_EXCLUSIVE_PORT,
    cb,
  );
}
