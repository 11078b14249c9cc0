/**
 * WS /v1/audio/transcriptions/stream on the API's base URL. The stream itself
 * is served by the realtime process (realtime/): in embedded mode the API's
 * HTTP server splices WebSocket upgrades through to it (api/server.ts), and
 * in a scaled deployment the load balancer routes the path there. A request
 * on this path that is not an upgrade reaches this route and gets what the
 * realtime tier answers it (interface 4.8): 426 `websocket_required` in the
 * realtime error shape. Also documents the stream in /openapi.json.
 */
import type { Middleware } from 'koa';
import type { Route } from '../../http/routes.js';
import { OPENAI_REALTIME_PATH, STREAM_PATH } from '../../../shared/paths.js';

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

/** A plain request on a WebSocket path: 426 websocket_required (the upgrade itself goes to the realtime tier). */
const upgradeRequired: Middleware = (ctx) => {
  ctx.status = 426;
  ctx.set('Upgrade', 'websocket');
  ctx.body = {
    error: {
      code: 'websocket_required',
      message: 'This endpoint needs a WebSocket upgrade.',
      type: 'realtime_error',
    },
  };
};

export function routes(): Route[] {
  return [
    {
      method: 'all',
      path: STREAM_PATH,
      chain: [upgradeRequired],
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
    {
      method: 'all',
      path: OPENAI_REALTIME_PATH,
      chain: [upgradeRequired],
      doc: {
        operationId: 'openaiRealtime',
        summary: "OpenAI's Realtime protocol for transcription sessions over a WebSocket (upgrade only)",
        description:
          'Authenticate with `Authorization: Bearer sk-…` (or `rt_…`), or from a browser with the subprotocols `realtime` and `openai-insecure-api-key.<rt_ secret>` (POST /v1/realtime/client_secrets). Fields honoured, ignored and refused: README, "OpenAI Realtime endpoint".',
        tags: ['realtime'],
        security: 'none',
        responses: {
          '101': { description: 'Switching Protocols: the session starts with `session.created`.' },
          '401': { description: 'Authentication failed', schema: realtimeErrorSchema },
          '426': {
            description: '`websocket_required`: not a WebSocket upgrade',
            schema: realtimeErrorSchema,
          },
        },
      },
    },
  ];
}
