/**
 * A request refused (or failed) with an HTTP status and a machine-readable
 * code. Shared code throws it; each tier renders it in its own error shape
 * (the API per plane, api/http/errors.ts; the engine worker, engine/app.ts).
 */
export class HttpRefusal extends Error {
  override name = 'HttpRefusal';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly opts: { retryable?: boolean; headers?: Record<string, string>; type?: string } = {},
  ) {
    super(message);
  }
}
