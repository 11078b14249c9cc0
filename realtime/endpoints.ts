/**
 * The realtime process's plain HTTP endpoints: 426 on the stream path
 * without an upgrade, `/health`, `/readyz`, `/readyz/instance` (the load
 * balancer's check), `/stats` (JSON, no tenant data),
 * `/metrics` (Prometheus, when enabled) and 404 for everything else.
 */
import type { Logger } from 'pino';
import type { HttpResponse, TemplatedApp } from 'uWebSockets.js';
import type { RealtimeConfig } from '../shared/config/realtime.js';
import type { LimitsDriver } from '../shared/limits/index.js';
import type { SpeechEngine } from '../shared/stt/types.js';
import type { VadService } from './vad/service.js';
import {
  enableProcessMetrics,
  renderMetrics,
  scrapeAllowed,
  SCRAPE_REFUSED,
  type MetricsPolicy,
} from '../shared/metrics/index.js';
import { OPENAI_REALTIME_PATH, STREAM_PATH } from '../shared/paths.js';
import type { CircuitBreaker } from './breaker.js';
import type { ConnectionQuota } from './quota.js';
import type { RealtimeSession } from './session.js';
import type { GatewayTimings } from './timings.js';
import { errorBody, writeJson } from './reply.js';

export interface EndpointDeps {
  rt: RealtimeConfig;
  metricsPolicy: MetricsPolicy & { enabled: boolean };
  engine: SpeechEngine;
  limits: LimitsDriver;
  breaker: CircuitBreaker;
  quota: ConnectionQuota;
  vad: VadService;
  timings: GatewayTimings;
  sessions: ReadonlySet<RealtimeSession>;
  /** False once the instance stops serving (shutdown, VAD failure). */
  serving: () => boolean;
  log: Logger;
}

/** Registers the endpoints; call after the stream path's WebSocket route (the 404 catches the rest). */
export function registerEndpoints(app: TemplatedApp, deps: EndpointDeps): void {
  const { rt, breaker, quota, vad, timings, sessions, log } = deps;

  for (const path of [STREAM_PATH, OPENAI_REALTIME_PATH]) {
    app.any(path, (res) => {
      writeJson(res, 426, errorBody('websocket_required', 'This endpoint needs a WebSocket upgrade.'), {
        upgrade: 'websocket',
      });
    });
  }

  app.get('/health', (res) => writeJson(res, 200, { ok: true, service: 'realtime' }));

  // `/readyz`: can this instance take realtime traffic now (the API's aggregate readiness asks it).
  // `/readyz/instance`: the load balancer's check, what is this instance's own: not the shared limits
  // store, whose blip would take every instance out at once; the instance answers upgrades itself
  // meanwhile (503 limits_unavailable with Retry-After) instead of the load balancer's page.
  // The two probes are kept for a second; the breaker and the serving flag are read on every call, so
  // readiness turns 503 the moment upgrades are refused (interface 4.2: 503 when realtime traffic
  // cannot be accepted), not a second later.
  let probeCache: { at: number; upstream: boolean; limits: boolean } | undefined;
  const readiness = async () => {
    if (!probeCache || Date.now() - probeCache.at > 1000) {
      const [upstream, limitsOk] = await Promise.all([
        deps.engine.healthy().catch(() => false),
        deps.limits.ping().catch(() => false),
      ]);
      probeCache = { at: Date.now(), upstream, limits: limitsOk };
    }
    const checks = {
      enabled: rt.enabled && deps.serving(),
      upstream: probeCache.upstream,
      breaker: breaker.state,
      limits: probeCache.limits,
    };
    return { checks, limits: probeCache.limits };
  };
  const ready = (withLimits: boolean) => (res: HttpResponse) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    void (async () => {
      const { checks, limits } = await readiness();
      const ok = Boolean(
        checks.enabled && checks.upstream && checks.breaker !== 'open' && (limits || !withLimits),
      );
      if (!aborted) {
        res.cork(() =>
          writeJson(res, ok ? 200 : 503, { ok, service: 'realtime', checks, sessions: sessions.size }),
        );
      }
    })();
  };
  app.get('/readyz', ready(true));
  app.get('/readyz/instance', ready(false));

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

  const metricsPolicy = deps.metricsPolicy;
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
}
