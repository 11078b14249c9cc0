/**
 * The route convention of the API: a route is one value — method, path, its
 * middleware chain and its OpenAPI operation — and each method and path has
 * exactly one route. Route modules return their routes (`routes(deps)`);
 * api/app.ts registers them all and api/openapi builds /openapi.json from
 * the same list, so an endpoint and its documentation are declared together.
 */
import type Router from '@koa/router';
import type { RouterMiddleware } from '@koa/router';
import type { Middleware } from 'koa';
import type { OperationSpec } from '../openapi/registry.js';

export type RouteMethod = 'get' | 'post' | 'put' | 'delete' | 'all';

/** An OpenAPI operation without what the route already says (method and path). */
export type OperationDoc = Omit<OperationSpec, 'method' | 'path'>;

export interface Route {
  method: RouteMethod;
  /**
   * @koa/router path (`:name` parameters, `{*name}` for the rest of the path),
   * or a RegExp for a family of paths (never documented).
   */
  path: string | RegExp;
  /** The middleware chain, the handler last. */
  chain: RouterMiddleware[];
  /** The route's OpenAPI operation; a route without one is left out of /openapi.json. */
  doc?: OperationDoc;
}

/** Registers the routes in order; a second route for the same method and path is a programming error. */
export function registerRoutes(router: Router, routes: readonly Route[]): void {
  const seen = new Set<string>();
  for (const r of routes) {
    const key = `${r.method.toUpperCase()} ${String(r.path)}`;
    if (seen.has(key)) throw new Error(`two routes for ${key}`);
    seen.add(key);
    router[r.method](r.path, ...r.chain);
  }
}

/** The OpenAPI operations of the documented routes (an `all` route is documented as its GET). */
export function operations(routes: readonly Route[]): OperationSpec[] {
  return routes.flatMap((r) =>
    r.doc && typeof r.path === 'string'
      ? [{ method: r.method === 'all' ? 'get' : r.method, path: openApiPath(r.path), ...r.doc }]
      : [],
  );
}

/** `/keys/:id` -> `/keys/{id}`, `/r2/{*key}` -> `/r2/{key}`. */
export function openApiPath(path: string): string {
  return path.replace(/\{\*(\w+)\}/g, '{$1}').replace(/:(\w+)/g, '{$1}');
}

/** Runs a chain of middleware as one (the last one's `next` is the caller's). */
export function chain(middleware: readonly Middleware[]): Middleware {
  return (ctx, next) => {
    const run = (i: number): Promise<void> =>
      i === middleware.length ? next() : Promise.resolve(middleware[i](ctx, () => run(i + 1)));
    return run(0);
  };
}
