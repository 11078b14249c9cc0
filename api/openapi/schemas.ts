/** Schemas shared by several route modules (responses and error shapes). */
import { PLAN_LIMIT_FIELDS } from '../../shared/plans.js';

export const planLimitsSchema = {
  type: 'object',
  properties: Object.fromEntries(PLAN_LIMIT_FIELDS.map((f) => [f, { type: 'integer', minimum: 0 }])),
  required: PLAN_LIMIT_FIELDS,
} as const;

export const apiErrorSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['message', 'type', 'code'],
      properties: { message: { type: 'string' }, type: { type: 'string' }, code: { type: 'string' } },
    },
  },
} as const;

export const batchErrorSchema = {
  type: 'object',
  required: ['error'],
  properties: { error: { type: 'string' }, code: { type: 'string' } },
} as const;

export const adminErrorSchema = {
  type: 'object',
  required: ['ok', 'error'],
  properties: {
    ok: { const: false },
    error: {
      type: 'object',
      required: ['code', 'message', 'retryable'],
      properties: { code: { type: 'string' }, message: { type: 'string' }, retryable: { type: 'boolean' } },
    },
  },
} as const;

export function adminEnvelope(data: object): object {
  return { type: 'object', required: ['ok', 'data'], properties: { ok: { const: true }, data } };
}

export const rateLimitHeaders = {
  'Retry-After': { description: 'Seconds until the request may be retried.', schema: { type: 'integer' } },
};

/** A 429 answer (rate limit exceeded) in the given error shape, with its Retry-After header. */
export function tooManyRequests(description: string, schema: object) {
  return { description, schema, headers: rateLimitHeaders };
}
