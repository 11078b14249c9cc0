/**
 * @koa/router's dispatch with an exact-path index in front. On every request
 * the router evaluates `ctx.host`, tests every route's pattern, builds a
 * middleware chain of fresh closures and composes it. For a route whose path
 * has no parameters the outcome for that exact (method, path) never changes,
 * so it is worked out once, with the router's own matching and chain
 * building, and looked up in a Map afterwards. Every other request (paths
 * with parameters, trailing slashes, other letter cases, unknown paths,
 * unknown methods) goes through the router unchanged, so 404/405 handling,
 * `ctx.params` and the order of fall-through routes stay exactly the
 * router's.
 */
import type Router from '@koa/router';
import type { Middleware, ParameterizedContext } from 'koa';
import compose from 'koa-compose';

type AnyContext = ParameterizedContext & Record<string, unknown>;

interface MatchResult {
  path: unknown[];
  pathAndMethod: { methods: string[]; path: unknown; name?: string | null }[];
  route: boolean;
}

/** The parts of @koa/router 15 that the index relies on; checked at start-up. */
interface RouterInternals {
  stack: { methods: string[]; path: unknown; paramNames: unknown[] }[];
  host?: unknown;
  opts: { routerPath?: string; exclusive?: boolean };
  match(path: string, method: string): MatchResult;
  _buildMiddlewareChain(layers: MatchResult['pathAndMethod'], requestPath: string): Middleware[];
}

/** Literal paths only: no parameters, wildcards, optional groups or escapes. */
const LITERAL = /^\/[A-Za-z0-9._~!$&'+,;=:@/-]*$/;

function internals(router: Router): RouterInternals | undefined {
  const r = router as unknown as RouterInternals;
  const usable =
    typeof r.match === 'function' &&
    typeof r._buildMiddlewareChain === 'function' &&
    Array.isArray(r.stack) &&
    !r.host &&
    !r.opts?.routerPath &&
    !r.opts?.exclusive;
  return usable ? r : undefined;
}

function buildIndex(r: RouterInternals, router: Router): Map<string, Map<string, Middleware>> {
  const index = new Map<string, Map<string, Middleware>>();
  for (const layer of r.stack) {
    if (layer.methods.length === 0 || layer.paramNames.length > 0) continue;
    if (typeof layer.path !== 'string' || !LITERAL.test(layer.path) || layer.path.includes(':')) continue;
    const path = layer.path;
    for (const method of layer.methods) {
      const match = r.match(path, method);
      if (!match.route) continue;
      const chain = compose(r._buildMiddlewareChain(match.pathAndMethod, path));
      const routeLayer = [...match.pathAndMethod].reverse().find((l) => l.methods.length > 0);
      const dispatch: Middleware = (ctx, next) => {
        // What the router's dispatch sets before running the chain.
        const c = ctx as AnyContext;
        c.matched = match.path.slice();
        c.router = router;
        c.routeMatched = true;
        if (routeLayer) {
          c._matchedRoute = routeLayer.path;
          if (routeLayer.name) c._matchedRouteName = routeLayer.name;
        }
        return chain(ctx, next);
      };
      let byPath = index.get(method);
      if (!byPath) index.set(method, (byPath = new Map()));
      byPath.set(path, dispatch);
    }
  }
  return index;
}

/** The `METHOD path` pairs the index answers (for tests and diagnostics). */
export function indexedRoutes(router: Router): string[] {
  const r = internals(router);
  if (!r) return [];
  return [...buildIndex(r, router)].flatMap(([method, byPath]) =>
    [...byPath.keys()].map((p) => `${method} ${p}`),
  );
}

/**
 * `router.routes()`, with literal routes found by one Map lookup. The index is
 * built on the first request, when every route module has registered.
 */
export function routes(router: Router): Middleware {
  const general = router.routes() as Middleware;
  const r = internals(router);
  if (!r) return general;
  let index: Map<string, Map<string, Middleware>> | undefined;
  return (ctx, next) => {
    index ??= buildIndex(r, router);
    const hit = index.get(ctx.method)?.get(ctx.path);
    return hit ? hit(ctx, next) : general(ctx, next);
  };
}
