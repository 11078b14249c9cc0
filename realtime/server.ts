/**
 * The realtime tier on uWebSockets.js: `WS /v1/audio/transcriptions/stream`,
 * `/health`, `/readyz`, `/metrics` (Prometheus) and `/stats` (JSON).
 *
 * Upgrade checks run in the order of interface 4.8: 426 websocket_required,
 * 503 gateway_disabled, 503 upstream_unavailable (+ Retry-After) while the
 * breaker is open, then quota and authentication. The per-key quota needs
 * the key's identity, so the credential is verified first (cached, cheap);
 * a caller that fails authentication consumes no quota.
 *
 * uWS upgrade handlers are synchronous: headers are read up front, the
 * async checks run after `onAborted` is attached, and the upgrade (or the
 * refusal) is written inside `cork` only if the client is still there.
 */
import { performance } from 'node:perf_hooks';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { HttpResponse, WebSocket, us_listen_socket } from 'uWebSockets.js';
import type { Config } from '../shared/config/index.js';
import { Authenticator, authFailure, type AuthResult, type Principal } from '../shared/auth/index.js';
import type { LimitsDriver } from '../shared/limits/index.js';
import type { SpeechEngine } from '../shared/stt/types.js';
import { windowUsage, type UsageLedger } from '../shared/usage.js';
import { createVadService, type VadService } from '../shared/vad/service.js';
import {
  enableProcessMetrics,
  renderMetrics,
  scrapeAllowed,
  SCRAPE_REFUSED,
} from '../shared/metrics/index.js';
import { loadUws } from './uws.js';
import * as metrics from './metrics.js';
import { GatewayTimings } from './timings.js';
import { CircuitBreaker } from './breaker.js';
import { ConnectionQuota } from './quota.js';
import { UsageMeter } from './metering.js';
import { RealtimeSession, newRequestId, newSessionId, type Transport } from './session.js';

import { STREAM_PATH } from '../shared/paths.js';

export interface RealtimeDeps {
  config: Config;
  logger: Logger;
  db: Knex;
  auth: Authenticator;
  limits: LimitsDriver;
  engine: SpeechEngine;
  /** The usage ledger (its owner, the composition root, starts and closes it). */
  ledger: UsageLedger;
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

interface UserData {
  principal: Principal;
  sessionId: string;
  requestId: string;
  remainingWindowSeconds: number;
  session?: RealtimeSession;
  closed: boolean;
}

type Credential = { token?: string; failure?: ReturnType<typeof authFailure> & { message: string } };

/** Authorization header (sk- or rt_) or `?access_token=` / `?token=` (rt_ only: an sk- key never travels in a URL). */
export function realtimeCredential(authorization: string, query: string): Credential {
  const params = new URLSearchParams(query);
  const given = [...params.getAll('access_token'), ...params.getAll('token')].filter((v) => v !== '');
  const q = given[0] ?? null;
  // A key in a URL has leaked (logs, history, referrers): refuse it even next to a valid header,
  // whichever parameter or repetition carries it.
  if (given.some((v) => !v.startsWith('rt_'))) {
    return {
      failure: {
        ...authFailure('invalid_api_key'),
        message: 'Only rt_ session tokens may be sent in the URL; send sk- keys in the Authorization header.',
      },
    };
  }
  if (authorization) {
    const b = Authenticator.bearer(authorization);
    return b.failure ? { failure: b.failure } : { token: b.token };
  }
  if (q === null || q === '') return { failure: authFailure('missing_api_key') };
  return { token: q };
}

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  401: '401 Unauthorized',
  404: '404 Not Found',
  426: '426 Upgrade Required',
  500: '500 Internal Server Error',
  429: '429 Too Many Requests',
  503: '503 Service Unavailable',
};

function writeJson(
  res: HttpResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeStatus(STATUS_TEXT[status] ?? `${status} Error`);
  res.writeHeader('content-type', 'application/json');
  for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
  res.end(JSON.stringify(body));
}

const errorBody = (code: string, message: string) => ({ error: { code, message, type: 'realtime_error' } });

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
  const sessions = new Set<RealtimeSession>();
  const meter = new UsageMeter(deps.ledger, () => sessions, deps.config.ledger.checkpointMs);
  let stopping = false;

  const timings = new GatewayTimings();
  const sessionDeps = {
    config: rt,
    engine: deps.engine,
    breaker,
    vad,
    logger: log,
    now: () => performance.now(),
    onCompleted: (latencyMs: number, engineMs: number) => {
      timings.recordCompletion(latencyMs, engineMs);
      metrics.completionLatency.observe(latencyMs / 1000);
      metrics.gatewayOverhead.observe(Math.max(0, latencyMs - engineMs) / 1000);
    },
    onUtterance: (outcome: 'completed' | 'failed' | 'dropped') => metrics.utterances.inc({ outcome }),
  };

  vad.onFailure?.((err) => {
    // Segmentation state is gone: end every session (1011) and stop admitting; /readyz turns 503
    // so the orchestrator replaces this instance.
    log.fatal({ err }, 'VAD thread failed; realtime instance no longer serving');
    stopping = true;
    for (const s of sessions) s.end('clientError');
  });

  breaker.onChange((state) => {
    log.warn({ state }, 'speech upstream circuit breaker changed state');
    metrics.breakerOpen.set(state === 'open' ? 1 : 0);
    if (state === 'open') for (const s of sessions) s.end('upstreamUnavailable');
  });

  // Overload refuses new sessions early (before auth) so that open ones keep their utterances.
  // Upgrades between this check and their session's start count as sessions.
  let admitting = 0;
  const atCapacity = () => {
    const { maxSessions, maxQueuedUtterances } = rt.overload;
    if (maxSessions > 0 && sessions.size + admitting >= maxSessions) return true;
    if (maxQueuedUtterances <= 0) return false;
    let queued = 0;
    for (const s of sessions) queued += s.inFlight.utterances;
    return queued >= maxQueuedUtterances;
  };

  const app = uWS.App();

  app.ws<UserData>(STREAM_PATH, {
    compression: uWS.DISABLED,
    // We check frame sizes ourselves (1009 audio_frame_too_large with an error event); uWS's own cap only
    // stops messages so large that they would be buffered whole before we see them (it drops the connection).
    maxPayloadLength: rt.maxMessageBytes,
    maxBackpressure: rt.clientBackpressureBytes * 4,
    closeOnBackpressureLimit: 0,
    idleTimeout: 120,
    sendPingsAutomatically: true,

    upgrade: (res, req, context) => {
      const secKey = req.getHeader('sec-websocket-key');
      const secProtocol = req.getHeader('sec-websocket-protocol');
      const secExtensions = req.getHeader('sec-websocket-extensions');
      const authorization = req.getHeader('authorization');
      const query = req.getQuery() ?? '';
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      const refuse = (
        status: number,
        code: string,
        message: string,
        headers: Record<string, string> = {},
      ) => {
        metrics.upgrades.inc({ outcome: code });
        if (aborted) return;
        res.cork(() => writeJson(res, status, errorBody(code, message), headers));
      };

      if (stopping || !rt.enabled)
        return refuse(503, 'gateway_disabled', 'The realtime gateway is disabled.');
      if (breaker.isOpen) {
        const retry = Math.max(1, Math.ceil(breaker.retryAfterMs() / 1000));
        return refuse(503, 'upstream_unavailable', 'The speech upstream is unavailable; retry later.', {
          'retry-after': String(retry),
        });
      }
      if (atCapacity()) {
        return refuse(503, 'upstream_unavailable', 'This realtime instance is at capacity; retry later.', {
          'retry-after': String(rt.overload.retryAfterSeconds),
        });
      }
      if (!deps.ledger.accepting) {
        // Postgres has been unreachable so long that the usage spool is full: no unbilled sessions.
        return refuse(503, 'usage_unavailable', 'Usage cannot be recorded right now; retry later.', {
          'retry-after': '30',
        });
      }
      const cred = realtimeCredential(authorization, query);
      if (cred.failure) return refuse(cred.failure.status, cred.failure.code, cred.failure.message);

      admitting++;
      void (async () => {
        let auth: AuthResult;
        try {
          auth = await deps.auth.authenticate(cred.token!);
        } catch {
          auth = authFailure('auth_unavailable');
        }
        if (!auth.ok) return refuse(auth.status, auth.code, auth.message);
        if (aborted) return;
        const principal = auth.principal;
        const sessionId = newSessionId();
        const admitted = await quota.admit(principal.keyId, principal.limits, sessionId);
        if (!admitted.ok) {
          return refuse(admitted.status, admitted.code, admitted.message, {
            'retry-after': String(admitted.retryAfterSeconds),
          });
        }
        let used = 0;
        try {
          used = await windowUsage(deps.db, principal.keyId, deps.config.usageWindowSeconds);
        } catch (err) {
          log.warn({ err }, 'could not read window usage; admitting with the full window budget');
        }
        if (aborted || stopping) {
          await quota.release(sessionId);
          return;
        }
        const data: UserData = {
          principal,
          sessionId,
          requestId: newRequestId(),
          remainingWindowSeconds: principal.limits.maxAudioSecondsPerWindow - used,
          closed: false,
        };
        metrics.upgrades.inc({ outcome: 'accepted' });
        res.cork(() => res.upgrade(data, secKey, secProtocol, secExtensions, context));
      })()
        .catch((err) => {
          log.error({ err }, 'realtime upgrade failed');
          refuse(503, 'upstream_unavailable', 'Upgrade failed; retry later.', { 'retry-after': '1' });
        })
        .finally(() => admitting--);
    },

    open: (ws: WebSocket<UserData>) => {
      const data = ws.getUserData();
      const transport: Transport = {
        send: (text) => {
          if (!data.closed) ws.cork(() => ws.send(text, false));
        },
        bufferedAmount: () => (data.closed ? 0 : ws.getBufferedAmount()),
        close: (code, reason) => {
          if (data.closed) return;
          data.closed = true;
          ws.cork(() => ws.end(code, reason));
        },
      };
      const session = new RealtimeSession(
        data.principal,
        data.remainingWindowSeconds,
        transport,
        sessionDeps,
        {
          sessionId: data.sessionId,
          requestId: data.requestId,
        },
      );
      data.session = session;
      sessions.add(session);
      metrics.sessionsOpen.inc();
      session.onEnded = (s) => {
        sessions.delete(session);
        metrics.sessionsOpen.dec();
        metrics.sessionsClosed.inc({ reason: metrics.closeLabel(s.closeCode, s.closeReason) });
        metrics.audioSeconds.inc(s.audioSeconds);
        void quota.release(s.sessionId);
        meter.record(s.keyId, s.sessionId, s.audioSeconds);
        log.info(
          {
            sessionId: s.sessionId,
            keyId: s.keyId,
            audioSeconds: s.audioSeconds,
            code: s.closeCode,
            reason: s.closeReason,
          },
          'realtime session ended',
        );
      };
      session.start();
    },

    message: (ws, message, isBinary) => {
      const s = ws.getUserData().session;
      if (!s) return;
      try {
        if (isBinary) s.onBinary(message);
        else s.onText(Buffer.from(message).toString('utf8'));
      } catch (err) {
        log.error({ err, sessionId: s.sessionId }, 'unexpected error handling a client message');
        s.end('clientError');
      }
    },

    close: (ws, code, message) => {
      const data = ws.getUserData();
      data.closed = true;
      data.session?.onTransportClosed(code, Buffer.from(message).toString('utf8'));
    },
  });

  app.any(STREAM_PATH, (res) => {
    writeJson(res, 426, errorBody('websocket_required', 'This endpoint needs a WebSocket upgrade.'), {
      upgrade: 'websocket',
    });
  });

  app.get('/health', (res) => writeJson(res, 200, { ok: true, service: 'realtime' }));

  let readyCache: { at: number; body: Record<string, unknown>; ok: boolean } | undefined;
  app.get('/readyz', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    void (async () => {
      if (!readyCache || Date.now() - readyCache.at > 1000) {
        const [upstream, limitsOk] = await Promise.all([
          deps.engine.healthy().catch(() => false),
          deps.limits.ping().catch(() => false),
        ]);
        const checks = {
          enabled: rt.enabled && !stopping,
          upstream,
          breaker: breaker.state,
          limits: limitsOk,
        };
        const ok = checks.enabled && upstream && breaker.state !== 'open' && limitsOk;
        readyCache = {
          at: Date.now(),
          ok,
          body: { ok, service: 'realtime', checks, sessions: sessions.size },
        };
      }
      if (!aborted) res.cork(() => writeJson(res, readyCache!.ok ? 200 : 503, readyCache!.body));
    })();
  });

  // Operational figures (no tenant data): sessions, VAD pool, timings since the last reset.
  app.get('/stats', (res, req) => {
    const reset = req.getQuery('reset') === '1';
    writeJson(res, 200, {
      sessions: sessions.size,
      leases: quota.size,
      vad: vad.stats(),
      breaker: breaker.state,
      ...timings.snapshot(),
      memory: process.memoryUsage(),
      cpu: process.cpuUsage(),
    });
    if (reset) timings.reset();
  });

  const metricsPolicy = deps.config.metrics;
  if (metricsPolicy.enabled) {
    enableProcessMetrics();
    app.get('/metrics', (res, req) => {
      if (!scrapeAllowed(metricsPolicy, req.getHeader('authorization'))) {
        return writeJson(res, 401, errorBody('metrics_unauthorized', SCRAPE_REFUSED), {
          'www-authenticate': 'Bearer',
        });
      }
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      renderMetrics().then(
        ({ contentType, body }) => {
          if (aborted) return;
          res.cork(() => {
            res.writeStatus('200 OK');
            res.writeHeader('content-type', contentType);
            res.writeHeader('cache-control', 'no-store');
            res.end(body);
          });
        },
        (err: unknown) => {
          log.error({ err }, 'metrics collection failed');
          if (!aborted)
            res.cork(() => writeJson(res, 500, errorBody('internal_error', 'Metrics unavailable.')));
        },
      );
    });
  }

  app.any('/*', (res) => writeJson(res, 404, errorBody('not_found', 'Not found.')));

  const tick = setInterval(() => {
    for (const s of sessions) s.tick();
  }, rt.tickMs);
  tick.unref();

  const host = opts.host ?? rt.host;
  const listenSocket = await new Promise<us_listen_socket>((resolve, reject) => {
    app.listen(host, opts.port ?? rt.port, (sock) =>
      sock
        ? resolve(sock)
        : reject(new Error(`realtime could not listen on ${host}:${opts.port ?? rt.port}`)),
    );
  });
  const port = uWS.us_socket_local_port(listenSocket as never);
  log.info({ port, host, vad: vad.stats().mode }, 'realtime listening');

  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      stopping = true;
      clearInterval(tick);
      uWS.us_listen_socket_close(listenSocket);
      // Sessions finish their open utterance and get the transcripts in flight
      // (bounded by closeDrainMs), then close 1001; usage is written after.
      for (const s of [...sessions]) s.end('goingAway');
      const drainedBy = Date.now() + rt.closeDrainMs + 1000;
      while (sessions.size > 0 && Date.now() < drainedBy) await new Promise((r) => setTimeout(r, 20));
      timings.close();
      await quota.close();
      await meter.drain();
      if (!opts.vad) await vad.close();
      log.info('realtime stopped');
    })());

  return { port, breaker, sessions, quota, meter, vad, stop };
}
