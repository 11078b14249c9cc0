/**
 * The Koa application: request context and logging, plane-aware error
 * rendering, the resource routers, and a JSON 404 for everything else.
 */
import Koa from 'koa';
import Router from '@koa/router';
import type { AppDeps } from './deps.js';
import { ApiError, errorHandler } from './http/errors.js';
import { requestContext } from './http/requestContext.js';
import { slowClients } from './http/slowClients.js';
import { diskFloorGuard } from './http/diskFloor.js';
import { registerRoutes } from './http/routes.js';
import { apiRoutes } from './routes/index.js';
import { ADMIN_PREFIX } from './routes/admin/index.js';

export function createApp(deps: AppDeps): Koa {
  // Behind TRUST_PROXY proxies, ctx.ip is the X-Forwarded-For entry that many hops from the right (what
  // our own proxies appended), never the client-supplied left part (issue 36).
  const hops = deps.config.http.trustProxy;
  const app = new Koa({ proxy: hops > 0, maxIpsCount: hops });
  app.silent = true; // errors are logged by errorHandler, never printed raw
  const router = new Router();
  registerRoutes(router, apiRoutes(deps));

  app.use(
    requestContext(deps.logger, {
      sample: deps.config.accessLogSample,
      metrics: deps.config.metrics.enabled,
    }),
  );
  app.use(
    slowClients({
      minBytesPerSecond: deps.config.http.minBodyBytesPerSecond,
      windowSeconds: deps.config.http.bodyRateWindowSeconds,
    }),
  );
  app.use(errorHandler({ retryAfterSeconds: deps.config.failure.retryAfterSeconds }));
  app.use(diskFloorGuard(deps.diskFloor));
  app.use(router.routes());
  // A route is a method and a path (interface section 4): any other pair, a known path with another
  // method included, is an unknown route, 404 `not_found` (interface 7.2 names no 405).
  app.use(async (ctx, next) => {
    if (ctx.status !== 404 || ctx.body !== undefined) {
      await next();
      return;
    }
    const isAdmin = ctx.path === ADMIN_PREFIX || ctx.path.startsWith(`${ADMIN_PREFIX}/`);
    if (isAdmin) ctx.state.plane = 'admin';
    throw new ApiError(
      404,
      'not_found',
      `Unknown ${isAdmin ? 'admin ' : ''}route ${ctx.method} ${ctx.path}.`,
    );
  });
  return app;
}
