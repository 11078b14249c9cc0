/**
 * HTTP metrics of the API: requests by route template, method and status,
 * and their duration. The route is the router's matched template
 * (`/v1/audio/transcriptions/jobs/:workflowId`), never the raw path, so ids
 * and unknown paths do not become label values.
 *
 * This runs on every request, so the counts live in a plain table keyed by
 * `method route` and are turned into Prometheus series only when scraped.
 * prom-client's own counter and histogram hash and validate their labels on
 * every call: 1.2–1.7 µs per request here against 0.3 µs for the table (one
 * Map lookup and a bucket search; `test/bench/api/metrics.ts`,
 * docs/benchmarks.md).
 */
import type { Context } from 'koa';
import type { Metric } from 'prom-client';
import { LATENCY_BUCKETS, registry } from '../../shared/metrics/index.js';

interface RouteRow {
  method: string;
  route: string;
  byStatus: Map<number, number>;
  /** Cumulative counts are built at scrape time; here each bucket counts its own observations. */
  buckets: Float64Array;
  sum: number;
  count: number;
}

const BOUNDS = LATENCY_BUCKETS;
// Kept on the registered metric, so a second load of this module (a test process may load it as ESM and
// as CJS) counts into the same table that scrapes read.
const rows: Map<string, RouteRow> =
  (registry.getSingleMetric('stt_http_requests_total') as unknown as { rows?: Map<string, RouteRow> })
    ?.rows ?? new Map();
const KNOWN_METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);

export function observeRequest(ctx: Context, status: number, seconds: number): void {
  const route =
    ((ctx as unknown as { _matchedRoute?: unknown })._matchedRoute as string | undefined) ?? 'unmatched';
  const method = KNOWN_METHODS.has(ctx.method) ? ctx.method : 'OTHER';
  const key = method + ' ' + route;
  let row = rows.get(key);
  if (!row) {
    row = {
      method,
      route,
      byStatus: new Map(),
      buckets: new Float64Array(BOUNDS.length + 1),
      sum: 0,
      count: 0,
    };
    rows.set(key, row);
  }
  row.byStatus.set(status, (row.byStatus.get(status) ?? 0) + 1);
  let b = 0;
  while (b < BOUNDS.length && seconds > BOUNDS[b]!) b++;
  row.buckets[b]!++;
  row.sum += seconds;
  row.count++;
}

type Value = { value: number; labels: Record<string, string | number>; metricName?: string };

/** A metric the registry reads at scrape time (the shape prom-client's own metrics give it). */
function tableMetric(name: string, help: string, type: 'counter' | 'histogram', values: () => Value[]): void {
  if (registry.getSingleMetric(name)) return;
  const get = () => ({ name, help, type, values: values(), aggregator: 'sum' });
  registry.registerMetric({ name, help, type, aggregator: 'sum', get, rows } as unknown as Metric);
}

tableMetric('stt_http_requests_total', 'HTTP requests answered by the API.', 'counter', () =>
  [...rows.values()].flatMap((r) =>
    [...r.byStatus].map(([status, n]) => ({
      value: n,
      labels: { method: r.method, route: r.route, status },
    })),
  ),
);

tableMetric(
  'stt_http_request_duration_seconds',
  'Time from request to response, by route template.',
  'histogram',
  () =>
    [...rows.values()].flatMap((r) => {
      const labels = { method: r.method, route: r.route };
      const out: Value[] = [];
      let cumulative = 0;
      for (let i = 0; i <= BOUNDS.length; i++) {
        cumulative += r.buckets[i]!;
        out.push({
          metricName: 'stt_http_request_duration_seconds_bucket',
          value: cumulative,
          labels: { le: i < BOUNDS.length ? BOUNDS[i]! : '+Inf', ...labels },
        });
      }
      out.push({ metricName: 'stt_http_request_duration_seconds_sum', value: r.sum, labels });
      out.push({ metricName: 'stt_http_request_duration_seconds_count', value: r.count, labels });
      return out;
    }),
);
