/** POST /v1/audio/transcriptions/session-token (interface 4.7): short-lived `rt_` tokens for browsers. */
import type { AppDeps } from '../../deps.js';
import { authError, requireApiKey } from '../../http/auth.js';
import { usePlane } from '../../http/errors.js';
import { requestRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';

import { STREAM_PATH } from '../../../shared/paths.js';
import { openaiTokenRoutes } from './openai.js';

const tokenSchema = {
  type: 'object',
  required: ['token', 'expires_in', 'endpoint'],
  properties: {
    token: { type: 'string', pattern: '^rt_' },
    expires_in: {
      type: 'integer',
      minimum: 1,
      maximum: 60,
      description: 'Seconds: 60',
    },
    endpoint: { type: 'string', const: STREAM_PATH },
  },
} as const;

export function routes(deps: AppDeps): Route[] {
  return [
    {
      method: 'post',
      path: '/v1/audio/transcriptions/session-token',
      chain: [
        usePlane('api'),
        requireApiKey(deps.auth),
        requestRateLimit(deps.limits),
        (ctx) => {
          const issued = deps.auth.issueSessionToken(ctx.state.principal);
          if ('ok' in issued) throw authError(issued);
          ctx.res.setHeader('Cache-Control', 'no-store');
          ctx.body = { token: issued.token, expires_in: issued.expires_in, endpoint: STREAM_PATH };
        },
      ],
      doc: {
        operationId: 'createSessionToken',
        summary: 'Issue a 60-second realtime session token bound to the calling key',
        tags: ['realtime'],
        security: 'apiKey',
        responses: {
          '200': { description: 'Token', schema: tokenSchema },
          '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
          '429': tooManyRequests('Request rate limit exceeded', apiErrorSchema),
          '503': {
            description: '`token_issuer_unavailable` (secret not configured) or `auth_unavailable`',
            schema: apiErrorSchema,
          },
        },
      },
    },
    ...openaiTokenRoutes(deps),
  ];
}
