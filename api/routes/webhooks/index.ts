/**
 * GET /v1/webhooks/secret: the key the calling tenant verifies its batch
 * webhooks with (docs/webhooks.md). Each tenant has its own, derived from the
 * operator's secret, so no tenant can sign a message another's receiver
 * accepts (issue 41).
 */
import type { AppDeps } from '../../deps.js';
import { requireApiKey } from '../../http/auth.js';
import { usePlane } from '../../http/errors.js';
import { pollRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';

export const WEBHOOK_SECRET_PATH = '/v1/webhooks/secret';

const secretSchema = {
  type: 'object',
  required: ['secret', 'owner_id'],
  properties: {
    secret: { type: 'string', pattern: '^whsec_', description: 'Standard Webhooks secret of this tenant.' },
    owner_id: {
      type: 'string',
      description: 'The tenant it belongs to (every key of the owner gets the same).',
    },
  },
} as const;

export function routes(deps: AppDeps): Route[] {
  return [
    {
      method: 'get',
      path: WEBHOOK_SECRET_PATH,
      chain: [
        usePlane('api'),
        requireApiKey(deps.auth),
        pollRateLimit(deps, 'reads'),
        async (ctx) => {
          const ownerId = ctx.state.principal.ownerId;
          ctx.set('Cache-Control', 'no-store');
          ctx.body = { secret: await deps.batch.webhookSecretFor(ownerId), owner_id: ownerId };
        },
      ],
      doc: {
        operationId: 'webhookSecret',
        summary: "The calling tenant's webhook signing secret",
        description:
          'Batch webhooks are signed (Standard Webhooks) with a key of the submitting tenant; verify them with this secret. Counted against POLL_REQUESTS_PER_MINUTE.',
        tags: ['batch'],
        security: 'apiKey',
        responses: {
          '200': { description: 'The secret', schema: secretSchema },
          '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
          '429': tooManyRequests('`rate_limit_exceeded`', apiErrorSchema),
        },
      },
    },
  ];
}
