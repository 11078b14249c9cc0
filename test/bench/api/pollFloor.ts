/**
 * The least a rate-limited job poll can be with this stack: Koa calling our
 * own API-key authentication, the shared Redis poll limit and the batch
 * poll reader directly, with nothing else around them (no router, request
 * id, access log, metrics or error rendering). run.ts measures it beside
 * the real route, in the same process and against the same workflow, so the
 * share of bare Koa that any poll through the public request path can reach
 * on the machine is in the same table (docs/benchmarks.md).
 */
import Koa from 'koa';
import type { AppDeps } from '../../../api/deps.js';

export function pollFloorApp({ auth, limits, batch, config }: AppDeps): Koa {
  const perMinute = config.pollRequestsPerMinute;
  const app = new Koa();
  app.use(async (ctx) => {
    const result = await auth.authenticateApiKey(ctx.get('authorization').slice('Bearer '.length));
    if (!result.ok) {
      ctx.status = 401;
      return;
    }
    const d = await limits.consume('polls', result.principal.keyId, perMinute);
    ctx.set('X-RateLimit-Limit', String(d.limit));
    ctx.set('X-RateLimit-Remaining', String(d.remaining));
    if (!d.allowed) {
      ctx.status = 429;
      return;
    }
    const body = await batch.poll(result.principal.ownerId, ctx.path.slice(ctx.path.lastIndexOf('/') + 1));
    ctx.type = 'application/json';
    ctx.body = body;
  });
  return app;
}
