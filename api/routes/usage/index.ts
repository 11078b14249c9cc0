/**
 * Usage reports (docs/decisions.md, "Usage reports"):
 *
 * - operators (admin token, admin envelope):
 *   GET /v1/external-transcription/owners/{owner_id}/usage and
 *   GET /v1/external-transcription/keys/{id}/usage
 * - a key holder, for its own key only (the playground's usage panel):
 *   GET /v1/usage, in the api plane's error shape, rate limited in the
 *   poll bucket so that looking at usage never spends transcription requests.
 *
 * Each: audio seconds by plane, requests, sessions and jobs per UTC day over
 * `from`..`to`, and every key's current billing window against its plan.
 */
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';
import { requireAdmin, requireApiKey } from '../../http/auth.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { pollRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { compile, validateQuery } from '../../http/validate.js';
import { pathParam } from '../../openapi/registry.js';
import { adminEnvelope, apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';
import { ADMIN_PREFIX, adminDoc, adminErrors } from '../admin/index.js';
import { keyIdParam } from '../admin/schemas.js';
import { type DateRange, isoDay, reportKeys, usageReport } from './report.js';
import { type UsageQuery, usageQuery, usageReportSchema } from './schemas.js';

export const SELF_USAGE_PATH = '/v1/usage';
/** The longest range one report covers (a year and a day). */
export const MAX_REPORT_DAYS = 366;
const DAY_MS = 86_400_000;

const ownerIdParam = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  pattern: '^[^\\u0000-\\u001f\\u007f]*$',
} as const;

/** `from`/`to` of the query, defaulted to the last 30 days, checked for order and length. */
export function resolveRange(q: UsageQuery, now = Date.now()): DateRange {
  const to = q.to ?? isoDay(now);
  const from = q.from ?? isoDay(Date.parse(`${to}T00:00:00Z`) - 29 * DAY_MS);
  const days = (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / DAY_MS + 1;
  if (days < 1) throw new ApiError(400, 'invalid_range', '"from" must not be after "to".');
  if (days > MAX_REPORT_DAYS) {
    throw new ApiError(400, 'invalid_range', `A report covers at most ${MAX_REPORT_DAYS} days.`);
  }
  return { from, to };
}

const rangeParams = (['from', 'to'] as const).map((name) => ({
  name,
  in: 'query',
  required: false,
  schema: usageQuery.properties[name],
}));
const SUMMARY = 'audio seconds by plane, requests, sessions and jobs per UTC day, and the billing window';

export function routes(deps: AppDeps): Route[] {
  const { db, plans, config } = deps;
  const admin = requireAdmin(config.auth);
  const query = validateQuery(usageQuery);
  const report = (ctx: Context, keys: Awaited<ReturnType<typeof reportKeys>>) =>
    usageReport(db, plans, keys, resolveRange(ctx.state.query as UsageQuery), config.usageWindowSeconds);
  const validKeyId = compile(keyIdParam);
  const validOwner = compile(ownerIdParam);

  return [
    {
      method: 'get',
      path: `${ADMIN_PREFIX}/owners/:ownerId/usage`,
      chain: [
        usePlane('admin'),
        admin,
        query,
        async (ctx) => {
          const ownerId = ctx.params.ownerId;
          if (!validOwner(ownerId)) throw new ApiError(400, 'invalid_request', 'Invalid owner id.');
          const data = await report(ctx, await reportKeys(db, { ownerId }));
          ctx.set('Cache-Control', 'no-store');
          ctx.body = { ok: true, data: { ownerId, ...data } };
        },
      ],
      doc: adminDoc({
        operationId: 'ownerUsage',
        summary: `Usage of every key of one owner: ${SUMMARY}`,
        parameters: [pathParam('ownerId', ownerIdParam, 'Owner (tenant) id'), ...rangeParams],
        responses: {
          '200': { description: 'Usage report', schema: adminEnvelope(usageReportSchema) },
          ...adminErrors(['400', '401', '500']),
        },
      }),
    },
    {
      method: 'get',
      path: `${ADMIN_PREFIX}/keys/:id/usage`,
      chain: [
        usePlane('admin'),
        admin,
        query,
        async (ctx) => {
          const id = ctx.params.id;
          const keys = validKeyId(id) ? await reportKeys(db, { keyId: id }) : [];
          if (keys.length === 0) throw new ApiError(404, 'key_not_found', 'No key with that id.');
          const data = await report(ctx, keys);
          ctx.set('Cache-Control', 'no-store');
          ctx.body = { ok: true, data: { keyId: id, ownerId: keys[0].owner_id, ...data } };
        },
      ],
      doc: adminDoc({
        operationId: 'keyUsage',
        summary: `Usage of one key: ${SUMMARY}`,
        parameters: [pathParam('id', keyIdParam, 'Key id'), ...rangeParams],
        responses: {
          '200': { description: 'Usage report', schema: adminEnvelope(usageReportSchema) },
          ...adminErrors(['400', '401', '404', '500']),
        },
      }),
    },
    {
      method: 'get',
      path: SELF_USAGE_PATH,
      chain: [
        usePlane('api'),
        requireApiKey(deps.auth),
        pollRateLimit(deps, 'reads'),
        query,
        async (ctx) => {
          const principal = ctx.state.principal;
          const data = await report(ctx, await reportKeys(db, { keyId: principal.keyId }));
          ctx.set('Cache-Control', 'no-store');
          ctx.body = { keyId: principal.keyId, ownerId: principal.ownerId, ...data };
        },
      ],
      doc: {
        operationId: 'ownUsage',
        summary: `Usage of the calling key: ${SUMMARY}`,
        description:
          'For key holders (the playground). Counted against POLL_REQUESTS_PER_MINUTE, not the plan.',
        tags: ['usage'],
        security: 'apiKey',
        parameters: rangeParams,
        responses: {
          '200': { description: 'Usage report of the calling key', schema: usageReportSchema },
          '400': { description: '`invalid_request`, `invalid_range`', schema: apiErrorSchema },
          '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
          '429': tooManyRequests('`rate_limit_exceeded`', apiErrorSchema),
        },
      },
    },
  ];
}
