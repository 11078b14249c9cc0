/**
 * HTTP metrics of the API: requests by route template, method and status,
 * and their duration, as prom-client counters and histograms. The route is
 * the router's matched template (`ctx.routerPath`, e.g.
 * `/v1/audio/transcriptions/jobs/:workflowId`), never the raw path, so ids
 * and unknown paths do not become label values.
 */
import type { Context } from 'koa';
import { LATENCY_BUCKETS, counter, histogram } from '../../shared/metrics/index.js';

const requests = counter('stt_http_requests_total', 'HTTP requests answered by the API.', [
  'method',
  'route',
  'status',
]);
const duration = histogram(
  'stt_http_request_duration_seconds',
  'Time from request to response, by route template.',
  LATENCY_BUCKETS,
  ['method', 'route'],
);

const KNOWN_METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);

export function observeRequest(ctx: Context, status: number, seconds: number): void {
  const route = (ctx as Context & { routerPath?: string }).routerPath ?? 'unmatched';
  const method = KNOWN_METHODS.has(ctx.method) ? ctx.method : 'OTHER';
  requests.inc({ method, route, status });
  duration.observe({ method, route }, seconds);
}
