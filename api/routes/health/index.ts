/** GET /health (liveness), GET /readyz and GET /readyz/instance (readiness, interface 4.2). */
import type { Middleware } from 'koa';
import type { AppDeps } from '../../deps.js';
import { runReadiness } from '../../http/readiness.js';
import type { Route } from '../../http/routes.js';

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

const readyResponses = (ready: string) => ({
  '200': { description: ready, schema: readySchema },
  '503': { description: 'Not ready; `reason` and `checks` say why.', schema: readySchema },
});

export function routes(deps: AppDeps): Route[] {
  const service = deps.config.serviceName;
  const ready =
    (only?: (name: string) => boolean): Middleware =>
    async (ctx) => {
      const { ok, checks } = await runReadiness(deps.readiness, only);
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
  const doc = (operationId: string, summary: string) => ({
    operationId,
    summary,
    tags: ['health'],
    security: 'none' as const,
  });
  return [
    {
      method: 'get',
      path: '/health',
      chain: [
        (ctx) => {
          ctx.body = { ok: true, service };
        },
      ],
      doc: {
        ...doc('health', 'Liveness'),
        responses: { '200': { description: 'The process is alive.', schema: healthSchema } },
      },
    },
    {
      method: 'get',
      path: '/readyz',
      chain: [ready()],
      doc: {
        ...doc('readyz', 'Readiness: database, Redis (when configured), speech engine and realtime upstream'),
        responses: readyResponses('Ready to take traffic.'),
      },
    },
    {
      // The load balancer's check of this instance: what it cannot serve without (database, engine).
      // Not the realtime tier, which has its own check (an API must not leave rotation because realtime
      // did), and not Redis: without it the API keeps serving on per-instance limits, and a Redis blip
      // failing every instance's check at once would put the load balancer's own 503 in front of all.
      method: 'get',
      path: '/readyz/instance',
      chain: [ready((name) => name !== 'realtime' && name !== 'redis' && name !== 'disk')],
      doc: {
        ...doc(
          'readyzInstance',
          "Readiness of this API instance alone (database, speech engine; Redis has a fallback): the load balancer's check",
        ),
        responses: readyResponses('This instance can take traffic.'),
      },
    },
  ];
}
