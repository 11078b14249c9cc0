/**
 * What the API's middleware puts on `ctx.state` (Koa's DefaultState), typed
 * once for every handler: the request's logger (requestContext), the plane
 * whose error shape applies (usePlane), the authenticated caller
 * (requireApiKey) and a validated query (validateQuery).
 */
import type { Logger } from 'pino';
import type { Principal } from '../../shared/auth/index.js';
import type { Plane } from './errors.js';

declare module 'koa' {
  interface DefaultState {
    log: Logger;
    requestId: string;
    plane?: Plane;
    principal: Principal;
    query?: unknown;
  }
}
