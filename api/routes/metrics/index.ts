/**
 * GET /metrics: Prometheus exposition of this API process (HTTP requests by
 * route, speech engine calls, batch workflows, billed audio, Node process
 * figures). Off with METRICS_ENABLED=false; guarded by METRICS_TOKEN when set.
 */
import type { AppDeps } from '../../deps.js';
import { ApiError } from '../../http/errors.js';
import type { Route } from '../../http/routes.js';
import { metricsRoute, SCRAPE_REFUSED } from '../../../shared/metrics/index.js';

export function routes(deps: AppDeps): Route[] {
  const policy = deps.config.metrics;
  if (!policy.enabled) return [];
  const refuse = () =>
    new ApiError(401, 'metrics_unauthorized', SCRAPE_REFUSED, { headers: { 'WWW-Authenticate': 'Bearer' } });
  return [
    {
      method: 'get',
      path: '/metrics',
      chain: [metricsRoute(policy, refuse)],
      doc: {
        operationId: 'metrics',
        summary: 'Prometheus metrics of this API instance',
        description:
          'Text exposition format. No tenant data in labels. Requires `Authorization: Bearer <METRICS_TOKEN>` when ' +
          'the server sets METRICS_TOKEN; absent (404) with METRICS_ENABLED=false.',
        tags: ['health'],
        security: 'none',
        responses: {
          '200': { description: 'The metrics.', contentType: 'text/plain', schema: { type: 'string' } },
          '401': { description: 'METRICS_TOKEN is set and the request did not carry it.' },
        },
      },
    },
  ];
}
