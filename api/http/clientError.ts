/**
 * Requests Node's HTTP parser refuses before the app sees them (a head too
 * large, a malformed request line, a head that never completes): answered in
 * the service's error shape instead of Node's bare status line, then closed.
 * Which route the request meant is unknown here, so the shape is the general
 * one (`{error: {message, type, code}}`).
 */
import type { Duplex } from 'node:stream';

interface ParserError extends Error {
  code?: string;
}

const ANSWERS: Record<string, [number, string, string, string]> = {
  HPE_HEADER_OVERFLOW: [
    431,
    'Request Header Fields Too Large',
    'headers_too_large',
    'The request headers are too large.',
  ],
  ERR_HTTP_REQUEST_TIMEOUT: [
    408,
    'Request Timeout',
    'request_timeout',
    'The request did not arrive in time.',
  ],
};
const MALFORMED: [number, string, string, string] = [
  400,
  'Bad Request',
  'invalid_request',
  'The request is not valid HTTP.',
];

/** The `clientError` listener of the API's servers. */
export function answerClientError(err: ParserError, socket: Duplex): void {
  // The client went away: nothing to answer.
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const [status, reason, code, message] = ANSWERS[err.code ?? ''] ?? MALFORMED;
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', code } });
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
