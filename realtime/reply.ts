/** JSON answers on uWS responses, in the realtime error shape (interface 4.8). */
import type { HttpResponse } from 'uWebSockets.js';

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  401: '401 Unauthorized',
  404: '404 Not Found',
  426: '426 Upgrade Required',
  500: '500 Internal Server Error',
  429: '429 Too Many Requests',
  503: '503 Service Unavailable',
};

export function writeJson(
  res: HttpResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeStatus(STATUS_TEXT[status] ?? `${status} Error`);
  res.writeHeader('content-type', 'application/json');
  for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
  res.end(JSON.stringify(body));
}

export const errorBody = (code: string, message: string) => ({
  error: { code, message, type: 'realtime_error' },
});
