import type Router from '@koa/router';
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';

const healthSchema = {
  type: 'object',
  required: ['ok', 'service'],
  properties: { ok: { type: 'boolean' }, service: { type: 'string' } },
};

const readySchema = {
  type: 'object',
  required: ['ok', 'service', 'checks'],
  properties: {
    ok: { type: 'boolean' },
    service: { type: 'string' },
    checks: { type: 'object', additionalProperties: { type: 'boolean' } },
    reason: { type: 'string', description: 'Why the service is not ready (names the failing checks).' },
  },
};

/** Runs every readiness check (or those `only` keeps) concurrently, each bounded in time. */
export async function runReadiness(
  deps: AppDeps,
  only: (name: string) => boolean = () => true,
): Promise<{ ok: boolean; checks: Record<string, boolean> }> {
  const results = await Promise.all(
    deps.readiness
      .filter((c) => only(c.name))
      .map(async (c) => {
        const ok = await Promise.race([
          c.check().catch(() => false),
          new Promise<boolean>((r) => setTimeout(r, 2500, false).unref()),
        ]);
        return [c.name, ok] as const;
      }),
  );
  const checks = Object.fromEntries(results);
  return { ok: results.every(([, ok]) => ok), checks };
}

/**
 * Realtime readiness (interface 4.2): ready when at least one realtime
 * instance answers its /readyz with 200. Cached for a second, so a burst of
 * probes costs one round of requests.
 */
function realtimeCheck(urls: string[]): () => Promise<boolean> {
  let cached: { at: number; ok: Promise<boolean> } | undefined;
  const probe = async (url: string) => {
    const res = await fetch(url, { signal: AbortSignal.timeout(1500) });
    await res.body?.cancel();
    if (!res.ok) throw new Error(`${url}: ${res.status}`);
    return true;
  };
  return () => {
    if (!cached || Date.now() - cached.at > 1000) {
      cached = { at: Date.now(), ok: Promise.any(urls.map(probe)).catch(() => false) };
    }
    return cached.ok;
  };
}

export function register(router: Router, deps: AppDeps): void {
  const service = deps.config.serviceName;
  const realtimeReadyUrls = deps.config.realtime.readyUrls;
  if (realtimeReadyUrls.length)
    deps.readiness.push({ name: 'realtime', check: realtimeCheck(realtimeReadyUrls) });
  router.get('/health', (ctx) => {
    ctx.body = { ok: true, service };
  });
  const ready = (only?: (name: string) => boolean) => async (ctx: Context) => {
    const { ok, checks } = await runReadiness(deps, only);
    const failing = Object.entries(checks)
      .filter(([, v]) => !v)
      .map(([k]) => k);
    ctx.status = ok ? 200 : 503;
    ctx.body = {
      ok,
      service,
      checks,
      ...(ok ? {} : { reason: `not ready: ${failing.join(', ')} unavailable` }),
    };
  };
  router.get('/readyz', ready());
  // The load balancer's check of this instance: its own dependencies (database, Redis, engine), not
  // the realtime tier, which has its own check (an API must not leave rotation because realtime did).
  router.get(
    '/readyz/instance',
    ready((name) => name !== 'realtime'),
  );
  deps.openapi.add({
    method: 'get',
    path: '/health',
    operationId: 'health',
    summary: 'Liveness',
    tags: ['health'],
    security: 'none',
    responses: { '200': { description: 'The process is alive.', schema: healthSchema } },
  });
  deps.openapi.add({
    method: 'get',
    path: '/readyz',
    operationId: 'readyz',
    summary: 'Readiness: database, Redis (when configured), speech engine and realtime upstream',
    tags: ['health'],
    security: 'none',
    responses: {
      '200': { description: 'Ready to take traffic.', schema: readySchema },
      '503': { description: 'Not ready; `reason` and `checks` say why.', schema: readySchema },
    },
  });
  deps.openapi.add({
    method: 'get',
    path: '/readyz/instance',
    operationId: 'readyzInstance',
    summary:
      "Readiness of this API instance alone (database, Redis, speech engine): the load balancer's check",
    tags: ['health'],
    security: 'none',
    responses: {
      '200': { description: 'This instance can take traffic.', schema: readySchema },
      '503': { description: 'Not ready; `reason` and `checks` say why.', schema: readySchema },
    },
  });
}
