/**
 * Request validation with ajv. The schemas passed here are the same objects
 * the OpenAPI document is generated from (api/openapi), so documentation and
 * validation cannot drift apart.
 */
import type { ErrorObject } from 'ajv';
import type { Middleware } from 'koa';
import { compile } from '../../shared/validation.js';
import { ApiError } from './errors.js';

import { FREE_TEXT } from '../../shared/validation.js';
export { ajv, compile } from '../../shared/validation.js';

/** What a pattern asks, in words (clients are shown this, not the regular expression). */
function patternInWords(pattern: string): string {
  if (pattern.startsWith('^[hH][tT][tT][pP]')) return 'must be an http:// or https:// URL';
  if (pattern === FREE_TEXT) return 'must not contain control characters (tabs and line breaks are allowed)';
  if (pattern.startsWith('^[^')) return 'must not contain control, invisible or text-direction characters';
  if (pattern === '\\p{L}') return 'must contain a letter';
  if (pattern.startsWith('^(word|segment)')) return 'must list word and/or segment';
  if (pattern.startsWith('^cf_')) return 'must be a workflow id (cf_ and 64 hexadecimal digits)';
  if (pattern.includes('A-Za-z0-9._:-'))
    return 'must be 1-128 letters, digits, dots, underscores, colons or hyphens (not "." or "..")';
  return 'has a form that is not allowed';
}

export function describeAjvError(e: ErrorObject | undefined, where: string): string {
  if (!e) return `${where} is invalid.`;
  const field = e.instancePath ? e.instancePath.slice(1).replace(/\//g, '.') : where;
  switch (e.keyword) {
    case 'additionalProperties':
      return `Unknown field "${(e.params as { additionalProperty: string }).additionalProperty}" in ${where}.`;
    case 'required':
      return `Missing required field "${(e.params as { missingProperty: string }).missingProperty}" in ${where}.`;
    case 'type':
      return `Field "${field}" must be of type ${(e.params as { type: string }).type}.`;
    case 'format':
      return `Field "${field}" must be a valid ${(e.params as { format: string }).format}.`;
    case 'pattern':
      return `Field "${field}" ${patternInWords((e.params as { pattern: string }).pattern)}.`;
    case 'maxLength':
      return `Field "${field}" must be at most ${(e.params as { limit: number }).limit} characters.`;
    case 'minLength':
      return `Field "${field}" must be at least ${(e.params as { limit: number }).limit} character${(e.params as { limit: number }).limit === 1 ? '' : 's'}.`;
    case 'not':
      // ajv's own words are "must NOT be valid"; the schemas use `not` for reserved values.
      return `Field "${field}" has a reserved value or one that is not allowed.`;
    default:
      return `Field "${field}" ${e.message ?? 'is invalid'}.`;
  }
}

/** Validates a value against a schema, throwing a 400 ApiError with a readable message. */
export function check<T>(schema: object, value: unknown, where: string, code = 'invalid_request'): T {
  const v = compile(schema);
  if (!v(value)) throw new ApiError(400, code, describeAjvError(v.errors?.[0], where));
  return value as T;
}

export function validateQuery(schema: object): Middleware {
  return async (ctx, next) => {
    ctx.state.query = check(schema, { ...ctx.query }, 'query');
    await next();
  };
}
