/**
 * The least a rate-limited job poll can be with this stack: the route's own
 * middleware (API-key authentication, the shared Redis poll limit, the poll
 * handler and its batched Postgres read) run by Koa with nothing around
 * them (no router, request id, access log, metrics or error rendering).
 * run.ts measures it beside the real route, in the same process and against
 * the same workflow, so the share of bare Koa that any poll through the
 * public request path can reach on the machine is in the same table
 * (docs/benchmarks.md).
 */
import Koa from 'koa';
import type { AppDeps } from '../../../api/deps.js';
import { requireApiKey } from '../../../api/http/auth.js';
import { pollRateLimit } from '../../../api/http/rateLimit.js';
import { pollHandler } from '../../../api/routes/jobs/index.js';

export function pollFloorApp(deps: AppDeps): Koa {
  const app = new Koa();
  app.silent = true;
  // What the router would have matched: the last path segment is the workflow id.
  app.use(async (ctx, next) => {
    (ctx as Koa.Context & { params: unknown }).params = {
      workflowId: ctx.path.slice(ctx.path.lastIndexOf('/') + 1),
    };
    await next();
  });
  app.use(requireApiKey(deps.auth));
  app.use(pollRateLimit(deps, 'job polls'));
  app.use(pollHandler(deps));
  return app;
}
