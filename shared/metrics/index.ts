/**
 * Prometheus metrics, one registry per process (prom-client's default), served
 * as `GET /metrics` by the API and by each realtime instance.
 *
 * Each plane declares its own metrics in a module of its own (api/http,
 * realtime, api/batch, shared/stt); a process exposes what it has loaded plus
 * Node's process metrics (CPU, memory, event-loop lag, GC). Labels are
 * bounded and carry no tenant data: route templates (never raw paths), plan
 * names, error codes, close reasons, worker indexes — never key ids, keys,
 * tokens or URLs.
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import client from 'prom-client';

export { client };
export const registry = client.register;
export const PREFIX = 'stt_';

/**
 * Node process metrics (prefixed `stt_`), once per process whatever the
 * number of servers in it. The registry is asked, not a flag of this module:
 * a test process may load this module twice (ESM and CJS) over one prom-client.
 */
export function enableProcessMetrics(): void {
  if (registry.getSingleMetric(`${PREFIX}process_cpu_user_seconds_total`)) return;
  client.collectDefaultMetrics({ register: registry, prefix: PREFIX });
}

/**
 * A metric of the default registry, made once per process: a module loaded in
 * two test apps (or two servers of one process) shares the same counter.
 */
export function metric<T extends client.Metric<string>>(name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

export function counter<L extends string>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): client.Counter<L> {
  return metric(name, () => new client.Counter({ name, help, labelNames }));
}

export function gauge<L extends string>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): client.Gauge<L> {
  return metric(name, () => new client.Gauge({ name, help, labelNames }));
}

export function histogram<L extends string>(
  name: string,
  help: string,
  buckets: number[],
  labelNames: readonly L[] = [],
): client.Histogram<L> {
  return metric(name, () => new client.Histogram({ name, help, buckets, labelNames }));
}

/** Latency buckets in seconds, 1 ms to 60 s. */
export const LATENCY_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

export interface MetricsPolicy {
  enabled: boolean;
  /** When set, scrapes must send `Authorization: Bearer <token>`. */
  token: string | undefined;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Whether a scrape may read the metrics: no token configured, or the right one (constant time). */
export function scrapeAllowed(policy: MetricsPolicy, authorization: string | undefined): boolean {
  if (!policy.token) return true;
  const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '');
  return !!m && timingSafeEqual(digest(m[1]), digest(policy.token));
}

/** The exposition text and its content type. */
export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  return { contentType: registry.contentType, body: await registry.metrics() };
}

export const SCRAPE_REFUSED = 'This endpoint needs Authorization: Bearer <METRICS_TOKEN>.';

/**
 * The `GET /metrics` handler of a Koa server (the API, the engine worker):
 * `refuse` builds that server's 401 error in its own error shape.
 */
export function metricsRoute(
  policy: MetricsPolicy,
  refuse: () => Error,
): (ctx: {
  get(h: string): string;
  type: string;
  body: unknown;
  set(h: string, v: string): void;
}) => Promise<void> {
  enableProcessMetrics();
  return async (ctx) => {
    if (!scrapeAllowed(policy, ctx.get('authorization'))) throw refuse();
    const { contentType, body } = await renderMetrics();
    ctx.type = contentType;
    ctx.set('Cache-Control', 'no-store');
    ctx.body = body;
  };
}
