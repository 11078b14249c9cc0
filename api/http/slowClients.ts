/**
 * Per-client bounds on slow connections (issue 22). A request body must keep
 * arriving at `minBytesPerSecond`, measured over each `windowSeconds`: a
 * client trickling an upload (one byte every few seconds) is answered 408
 * `request_timeout` and its connection closed within a window, not after
 * Node's five-minute request limit.
 *
 * A request refused before its body was read (401, 413, 429, 503 …) has the
 * rest of its body read and discarded before the answer goes out, so a client
 * still sending gets its answer instead of a broken pipe (an HTTP client
 * writing the body does not read the response until it is done). The drain is
 * bounded: at most `LINGER_MS` and `LINGER_MAX_BYTES`, and at least
 * `minBytesPerSecond` in every second; past a bound the answer goes out with
 * `Connection: close` and the socket is closed, so an unauthenticated sender
 * cannot keep the socket by going on sending.
 */
import type { Context, Middleware, Next } from 'koa';
import { renderError, ApiError } from './errors.js';

export interface SlowClientLimits {
  minBytesPerSecond: number;
  windowSeconds: number;
  /** Longest drain of a refused request's unread body (default LINGER_MS). */
  lingerMs?: number;
}

/** How long a refused request's body is read and discarded before its answer goes out without it. */
export const LINGER_MS = 10_000;
/** How much of a refused request's body is read and discarded at most. */
export const LINGER_MAX_BYTES = 64 * 1024 * 1024;

export function slowClients(limits: SlowClientLimits): Middleware {
  return async (ctx: Context, next: Next) => {
    const req = ctx.req;
    const hasBody =
      Number(req.headers['content-length'] || 0) > 0 || Boolean(req.headers['transfer-encoding']);
    let timer: NodeJS.Timeout | undefined;
    if (hasBody && limits.minBytesPerSecond > 0 && !req.complete) {
      // Bytes off the socket (reading the request's own 'data' would take the body from its parser).
      const socket = req.socket;
      let mark = socket.bytesRead;
      const need = limits.minBytesPerSecond * limits.windowSeconds;
      timer = setInterval(() => {
        if (req.complete || req.destroyed) return clearInterval(timer);
        const got = socket.bytesRead - mark;
        mark = socket.bytesRead;
        // Only while the body is being read: a paused request (the route busy elsewhere) holds the client back.
        if (got >= need || req.readableFlowing !== true) return;
        clearInterval(timer);
        refuseSlow(ctx, limits);
      }, limits.windowSeconds * 1000);
      timer.unref();
    }
    try {
      await next();
    } finally {
      if (timer) clearInterval(timer);
      // Answered before the body was read: read the rest (discarded) so the sender sees the answer.
      if (hasBody && !req.complete && !req.destroyed && !ctx.res.headersSent) {
        const drained = await drain(req, limits);
        if (!drained && !ctx.res.headersSent) {
          ctx.set('Connection', 'close');
          ctx.res.once('finish', () => req.socket.destroy());
        }
      }
    }
  };
}

/** Reads and discards the rest of a request body within the linger bounds; true when it ended. */
function drain(req: Context['req'], limits: SlowClientLimits): Promise<boolean> {
  return new Promise((resolve) => {
    let total = 0;
    let second = 0;
    const finish = (ended: boolean) => {
      clearInterval(rate);
      clearTimeout(cap);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      if (!ended) req.pause();
      resolve(ended);
    };
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      second += chunk.length;
      if (total > LINGER_MAX_BYTES) finish(false);
    };
    const onEnd = () => finish(true);
    const onClose = () => finish(req.complete);
    const rate = setInterval(() => {
      if (limits.minBytesPerSecond > 0 && second < limits.minBytesPerSecond) finish(false);
      second = 0;
    }, 1000);
    const cap = setTimeout(() => finish(false), limits.lingerMs ?? LINGER_MS);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('close', onClose);
    req.resume();
  });
}

/** Answers 408 in the route's plane at once and closes the connection (the body parser is still waiting). */
function refuseSlow(ctx: Context, limits: SlowClientLimits): void {
  const res = ctx.res;
  ctx.state.log?.info({ code: 'request_timeout' }, 'request body too slow');
  if (!res.headersSent) {
    const err = new ApiError(
      408,
      'request_timeout',
      `The request body arrived slower than ${limits.minBytesPerSecond} bytes/s over ${limits.windowSeconds} s.`,
    );
    const body = JSON.stringify(renderError(ctx.state.plane ?? 'api', err));
    res.writeHead(408, { 'Content-Type': 'application/json; charset=utf-8', Connection: 'close' });
    res.end(body);
  }
  res.once('finish', () => ctx.req.socket.destroy());
  setTimeout(() => ctx.req.socket.destroy(), 1000).unref();
}
