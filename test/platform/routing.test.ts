import { expect } from 'chai';
import Koa from 'koa';
import Router from '@koa/router';
import request from 'supertest';
import { indexedRoutes, routes } from '../../api/http/routing.js';

/** What a handler can see of the routing: the index must leave it exactly as the router does. */
function seen(ctx: Koa.Context & Record<string, unknown>, by: string) {
  return {
    by,
    params: ctx.params,
    captures: ctx.captures,
    routerPath: ctx.routerPath,
    matchedRoute: ctx._matchedRoute,
    matched: (ctx.matched as { path: string }[]).map((l) => l.path),
    routeMatched: ctx.routeMatched,
  };
}

function build(dispatch: (r: Router) => Koa.Middleware, router = new Router()): Koa {
  router.get(
    '/a',
    async (ctx, next) => {
      ctx.state.trail = ['before'];
      await next();
    },
    (ctx) => {
      ctx.body = seen(ctx, 'a');
    },
  );
  router.post('/a', (ctx) => {
    ctx.body = seen(ctx, 'post a');
  });
  router.get('/b', (_ctx, next) => next()); // falls through to the parameter route
  router.get('/:id', (ctx, next) => {
    if (ctx.params.id === 'none') return next();
    ctx.body = seen(ctx, 'param');
  });
  router.get('/x/y', (ctx) => {
    ctx.body = seen(ctx, 'x/y');
  });
  const app = new Koa();
  app.use(dispatch(router));
  app.use(router.allowedMethods());
  app.use((ctx) => {
    ctx.status = 404;
    ctx.body = { by: 'app 404' };
  });
  return app;
}

describe('routing: exact-path index in front of @koa/router', () => {
  const viaRouter = build((r) => r.routes() as unknown as Koa.Middleware).callback();
  const viaIndex = build(routes).callback();

  it('indexes the literal routes and leaves parameter routes to the router', () => {
    const router = new Router();
    build((r) => r.routes() as unknown as Koa.Middleware, router);
    expect(indexedRoutes(router).sort()).to.deep.equal([
      'GET /a',
      'GET /b',
      'GET /x/y',
      'HEAD /a',
      'HEAD /b',
      'HEAD /x/y',
      'POST /a',
    ]);
  });

  const cases: [string, string][] = [
    ['GET', '/a'],
    ['HEAD', '/a'],
    ['POST', '/a'],
    ['GET', '/a/'],
    ['GET', '/A'],
    ['GET', '/b'],
    ['GET', '/none'],
    ['GET', '/x/y'],
    ['GET', '/x/y?q=1'],
    ['PUT', '/a'],
    ['DELETE', '/zzz/q'],
    ['OPTIONS', '/a'],
  ];
  for (const [method, path] of cases) {
    it(`${method} ${path} is answered exactly as the router answers it`, async () => {
      const call = (app: ReturnType<Koa['callback']>) =>
        request(app)
          [method.toLowerCase() as 'get'](path)
          .then((res) => ({
            status: res.status,
            body: res.body,
            allow: res.headers.allow,
          }));
      const [a, b] = [await call(viaRouter), await call(viaIndex)];
      expect(b).to.deep.equal(a);
    });
  }
});
