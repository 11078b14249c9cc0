/**
 * WS /v1/audio/transcriptions/stream on the API's base URL. The stream itself
 * is served by the realtime process (realtime/): in embedded mode the API's
 * HTTP server splices WebSocket upgrades through to it (api/server.ts), and
 * in a scaled deployment the load balancer routes the path there. A request
 * on this path that is not an upgrade reaches this route and gets what the
 * realtime tier answers it (interface 4.8): 426 `websocket_required` in the
 * realtime error shape. Also documents the stream in /openapi.json.
 */
import type { Route } from '../../http/routes.js';
import { STREAM_PATH } from '../../../shared/paths.js';

const realtimeErrorSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message', 'type'],
      properties: {
        code: { type: 'string' },
        message: { type: 'string' },
        type: { const: 'realtime_error' },
      },
    },
  },
} as const;

export function routes(): Route[] {
  return [
    {
      method: 'all',
      path: STREAM_PATH,
      chain: [
        (ctx) => {
          ctx.status = 426;
          ctx.set('Upgrade', 'websocket');
          ctx.body = {
            error: {
              code: 'websocket_required',
              message: 'This endpoint needs a WebSocket upgrade.',
              type: 'realtime_error',
            },
          };
        },
      ],
      // Documented as the GET that carries the upgrade.
      doc: {
        operationId: 'realtimeStream',
        summary: 'Realtime transcription over a WebSocket (upgrade only)',
        description:
          'Authenticate with `Authorization: Bearer sk-…`, or with `?access_token=rt_…` / `?token=rt_…` from POST /v1/audio/transcriptions/session-token (an `sk-` key is never accepted in the URL). Events and close codes: docs/realtime.md.',
        tags: ['realtime'],
        security: 'none',
        responses: {
          '101': { description: 'Switching Protocols: the session starts with `session.created`.' },
          '401': { description: 'Authentication failed', schema: realtimeErrorSchema },
          '426': {
            description: '`websocket_required`: not a WebSocket upgrade',
            schema: realtimeErrorSchema,
          },
          '429': { description: 'Connection quota of the plan exceeded', schema: realtimeErrorSchema },
          '503': {
            description:
              '`gateway_disabled`, or `upstream_unavailable` with Retry-After while the breaker is open',
            schema: realtimeErrorSchema,
          },
        },
      },
    },
  ];
}
