/**
 * Embedded mode: one base URL for REST and WebSocket. The API's Node
 * http.Server hands upgrades of the stream path to this function, which pipes
 * the raw TCP connection to the realtime process (uWS). The HTTP upgrade
 * request is replayed byte for byte (headers included, so Authorization and
 * the query token reach the realtime tier unchanged); after that the two
 * sockets are spliced and every WebSocket frame passes through untouched.
 *
 *   const detach = attachRealtimeProxy(server, { port: realtimePort });
 */
import net from 'node:net';
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { OPENAI_REALTIME_PATH, STREAM_PATH } from '../../shared/paths.js';

export interface RealtimeProxyOptions {
  host?: string;
  port: number;
  /** Paths routed to the realtime tier (default: the stream path and OpenAI's `/v1/realtime`). */
  paths?: string[];
  /** Upper bound for connecting to the realtime process. */
  connectTimeoutMs?: number;
  /**
   * Retry-After (seconds) of the 503 upstream_unavailable answered while the
   * realtime process cannot be reached (interface 7.2; REALTIME_RETRY_AFTER_SECONDS in shared/config/platform.ts).
   */
  retryAfterSeconds?: number;
}

function refuse(socket: Duplex, status: string, code: string, message: string, extra = ''): void {
  const body = JSON.stringify({ error: { code, message, type: 'realtime_error' } });
  socket.end(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`,
  );
}

/** Attaches to `server`'s 'upgrade' event; returns a function that detaches it. */
export function attachRealtimeProxy(server: http.Server, opts: RealtimeProxyOptions): () => void {
  const paths = new Set(opts.paths ?? [STREAM_PATH, OPENAI_REALTIME_PATH]);
  const host = opts.host ?? '127.0.0.1';
  const onUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const pathname = (req.url ?? '/').split('?')[0];
    if (!paths.has(pathname)) {
      // Another upgrade listener may own this path; if none does, refuse.
      if (server.listenerCount('upgrade') === 1) refuse(socket, '404 Not Found', 'not_found', 'Not found.');
      return;
    }
    const upstream = net.connect({ host, port: opts.port });
    upstream.setNoDelay(true);
    (socket as net.Socket).setNoDelay?.(true);
    const timer = setTimeout(
      () => upstream.destroy(new Error('connect timeout')),
      opts.connectTimeoutMs ?? 5000,
    );
    upstream.once('connect', () => {
      clearTimeout(timer);
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2)
        lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      upstream.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      // A refused upgrade (401, 429, 503...) is a plain HTTP answer: pass it on and close, so
      // the client's connection does not linger as keep-alive on a path that only upgrades.
      upstream.once('data', (first: Buffer) => {
        if (!first.subarray(0, 12).toString('latin1').startsWith('HTTP/1.1 101')) {
          socket.end(first);
          upstream.destroy();
          return;
        }
        socket.write(first);
        upstream.pipe(socket);
        socket.pipe(upstream);
      });
    });
    upstream.once('error', () => {
      clearTimeout(timer);
      if (!socket.destroyed && (socket as net.Socket).bytesWritten === 0) {
        refuse(
          socket,
          '503 Service Unavailable',
          'upstream_unavailable',
          'The realtime tier is not reachable; retry shortly.',
          `retry-after: ${opts.retryAfterSeconds ?? 2}\r\n`,
        );
      } else {
        socket.destroy();
      }
    });
    socket.once('error', () => upstream.destroy());
    socket.once('close', () => upstream.destroy());
    upstream.once('close', () => socket.destroy());
  };
  server.on('upgrade', onUpgrade);
  return () => server.off('upgrade', onUpgrade);
}
