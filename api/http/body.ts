import type { Middleware } from 'koa';
import { koaBody } from 'koa-body';
import { ApiError } from './errors.js';

/** Content types read as JSON. */
const JSON_TYPES = ['application/json', '+json'];

/**
 * JSON body parsing for JSON routes. A non-empty body must be declared as
 * JSON and parse as a JSON object; errors become 400/413 in the route's plane.
 */
export function jsonBody(limitBytes: number, opts: { allowEmpty?: boolean } = {}): Middleware {
  const parse = koaBody({
    json: true,
    // Any JSON parses; what is not an object is refused below by name, not as "not valid JSON".
    jsonStrict: false,
    jsonLimit: limitBytes,
    // Every type the gate below admits is parsed (koa-body's own list left application/merge-patch+json
    // and other +json types unparsed, read as an empty body).
    jsonTypes: JSON_TYPES,
    multipart: false,
    urlencoded: false,
    text: false,
    onError: (err) => {
      const e = err as { status?: number; type?: string };
      if (e.status === 413 || e.type === 'entity.too.large') {
        throw new ApiError(413, 'payload_too_large', `The request body exceeds ${limitBytes} bytes.`);
      }
      // secure-json-parse refuses prototype poisoning: valid JSON, a forbidden field.
      if (/forbidden prototype property/.test(String(err?.message))) {
        throw new ApiError(400, 'invalid_request', 'A field named "__proto__" is not allowed.');
      }
      throw new ApiError(400, 'invalid_json', 'The request body is not valid JSON.');
    },
  });
  return async (ctx, next) => {
    const hasBody = Number(ctx.get('content-length') || 0) > 0 || Boolean(ctx.get('transfer-encoding'));
    if (!hasBody) {
      if (!opts.allowEmpty) throw new ApiError(400, 'invalid_json', 'A JSON request body is required.');
      ctx.request.body = {};
      await next();
      return;
    }
    if (!ctx.is(JSON_TYPES)) {
      throw new ApiError(
        400,
        'invalid_json',
        'The request body must be JSON (Content-Type: application/json).',
      );
    }
    await parse(ctx, async () => {});
    const body = ctx.request.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new ApiError(400, 'invalid_json', 'The request body must be a JSON object.');
    }
    await next();
  };
}
