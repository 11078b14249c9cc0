/**
 * Request id (`X-Request-Id` in and out) and one structured access-log line
 * per request. Handlers log through ctx.state.log, a child logger carrying the
 * request id, made only when first used (most requests log just the access
 * line). This runs on every request, so it stays lean: no per-request
 * closures or property definitions, raw header access.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Middleware } from 'koa';
import type { Logger } from 'pino';
import type { Principal } from '../../shared/auth/index.js';
import type { Plane } from './errors.js';
import { scrubSecrets } from '../../shared/logger.js';
import { observeRequest } from './metrics.js';

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** ctx.state of every request: the request id and a lazily made child logger. */
export class RequestState {
  /** Set by usePlane / requireApiKey / validateQuery on the routes that use them (api/http/state.ts). */
  declare plane?: Plane;
  declare principal: Principal;
  declare query?: unknown;
  private child: Logger | undefined;

  constructor(
    private readonly root: Logger,
    readonly requestId: string,
  ) {}

  get log(): Logger {
    return (this.child ??= this.root.child({ reqId: this.requestId }));
  }
}

/**
 * `sample` (ACCESS_LOG_SAMPLE): the share of successful requests (status <
 * 400) that get an access line; refused and failed ones always do.
 */
export function requestContext(
  logger: Logger,
  opts: { sample?: number; metrics?: boolean } = {},
): Middleware {
  const sample = opts.sample ?? 1;
  const metrics = opts.metrics ?? false;
  return async (ctx, next) => {
    const incoming = ctx.req.headers['x-request-id'];
    // A caller's id is kept when it is plain and carries nothing secret-shaped (it goes into every log line).
    const requestId =
      typeof incoming === 'string' && SAFE_ID.test(incoming) && scrubSecrets(incoming) === incoming
        ? incoming
        : randomUUID();
    ctx.state = new RequestState(logger, requestId);
    ctx.res.setHeader('X-Request-Id', requestId);
    const started = performance.now();
    try {
      await next();
    } finally {
      const status = ctx.status;
      const elapsed = performance.now() - started;
      if (metrics) observeRequest(ctx, status, elapsed / 1000);
      if ((sample >= 1 || status >= 400 || Math.random() < sample) && logger.isLevelEnabled('info')) {
        logger.info(
          {
            reqId: requestId,
            method: ctx.method,
            path: ctx.path, // path only: query strings may carry tokens
            status,
            ms: Math.round(elapsed * 10) / 10,
            keyId: (ctx.state.principal as { keyId?: string } | undefined)?.keyId,
            // The share of successful requests logged, so a reader can scale counts; omitted at 1.
            sample: sample < 1 ? sample : undefined,
          },
          'request',
        );
      }
    }
  };
}
