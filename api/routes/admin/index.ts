/**
 * Operator admin API (interface 4.11): the public plan catalog and key
 * management behind the admin token, all in the `{ok, data}` envelope.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';
import { requireAdmin } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, isDataException, isStoreUnavailable, usePlane } from '../../http/errors.js';
import { check, compile, validateQuery } from '../../http/validate.js';
import { pathParam } from '../../openapi/registry.js';
import { adminEnvelope, adminErrorSchema } from '../../openapi/schemas.js';
import {
  type IssueKeyBody,
  issueKeyBody,
  keyIdParam,
  keyRecordSchema,
  listKeysQuery,
  planSchema,
} from './schemas.js';

export const ADMIN_PREFIX = '/v1/external-transcription';

const storeUnavailable = () =>
  new ApiError(500, 'store_unavailable', 'The key store is unavailable; try again shortly.', {
    retryable: true,
  });

function ok(ctx: Context, data: unknown, status = 200): void {
  ctx.status = status;
  ctx.body = { ok: true, data };
}

async function guardStore<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (isStoreUnavailable(err)) throw storeUnavailable();
    throw err;
  }
}

export function register(router: Router, deps: AppDeps): void {
  const { config, keys, plans, auth } = deps;
  const admin = requireAdmin(config.auth.adminToken);
  const plane = usePlane('admin');

  // The catalog is fixed for the life of the process: serialise it once.
  const catalog = JSON.stringify({ ok: true, data: plans.list() });
  router.get(`${ADMIN_PREFIX}/plans`, plane, (ctx) => {
    ctx.type = 'application/json';
    ctx.body = catalog;
  });

  router.post(
    `${ADMIN_PREFIX}/keys`,
    plane,
    admin,
    jsonBody(config.http.maxJsonBytes, { allowEmpty: true }),
    async (ctx) => {
      const body = check<IssueKeyBody>(issueKeyBody, ctx.request.body, 'body');
      const plan = body.plan ?? config.plans.defaultPlan;
      if (!plans.has(plan)) {
        throw new ApiError(
          400,
          'invalid_plan',
          `Unknown plan "${plan}". Known plans: ${plans
            .list()
            .map((p) => p.plan)
            .join(', ')}.`,
        );
      }
      let expiresAt: Date | undefined;
      if (body.expires_at !== undefined) {
        expiresAt = new Date(body.expires_at);
        if (Number.isNaN(expiresAt.getTime()) || expiresAt.getTime() <= Date.now()) {
          throw new ApiError(
            400,
            'invalid_request',
            'Field "expires_at" must be an ISO 8601 date-time in the future.',
          );
        }
      }
      try {
        const record = await keys.issue({ ownerId: body.owner_id, plan, label: body.label, expiresAt });
        ctx.state.log.info({ keyId: record.id, ownerId: record.ownerId, plan }, 'api key issued');
        ok(ctx, record, 201);
      } catch (err) {
        if (isStoreUnavailable(err)) throw storeUnavailable();
        if (isDataException(err)) throw err; // the input's fault: 400 from the error middleware
        ctx.state.log.error({ err }, 'key issue failed');
        throw new ApiError(500, 'issue_failed', 'The key could not be issued.', { retryable: true });
      }
    },
  );

  router.get(`${ADMIN_PREFIX}/keys`, plane, admin, validateQuery(listKeysQuery), async (ctx) => {
    const { owner_id } = ctx.state.query as { owner_id?: string };
    ok(ctx, await guardStore(() => keys.list({ ownerId: owner_id })));
  });

  // An id that cannot be a key id is simply not found (and is not echoed back).
  const validKeyId = compile(keyIdParam);
  const notFound = (id: string) =>
    new ApiError(404, 'key_not_found', validKeyId(id) ? `No key with id "${id}".` : 'No key with that id.');

  router.get(`${ADMIN_PREFIX}/keys/:id`, plane, admin, async (ctx) => {
    const id = ctx.params.id;
    const row = validKeyId(id) ? await guardStore(() => keys.get(id)) : undefined;
    if (!row) throw notFound(id);
    ok(ctx, keys.present(row));
  });

  router.delete(`${ADMIN_PREFIX}/keys/:id`, plane, admin, async (ctx) => {
    const id = ctx.params.id;
    const row = validKeyId(id) ? await guardStore(() => keys.revoke(id)) : undefined;
    if (!row) throw notFound(id);
    auth.invalidate(row);
    ctx.state.log.info({ keyId: row.id }, 'api key revoked');
    ok(ctx, keys.present(row));
  });

  describe(deps);
}

function describe(deps: AppDeps): void {
  const errors = (codes: string[]) =>
    Object.fromEntries(codes.map((c) => [c, { description: 'Error envelope', schema: adminErrorSchema }]));
  const idParam = pathParam('id', keyIdParam, 'Key id');
  deps.openapi.add({
    method: 'get',
    path: `${ADMIN_PREFIX}/plans`,
    operationId: 'listPlans',
    summary: 'Plan catalog (public)',
    tags: ['admin'],
    security: 'none',
    responses: {
      '200': {
        description: 'Plans and their limits',
        schema: adminEnvelope({ type: 'array', items: planSchema }),
      },
    },
  });
  deps.openapi.add({
    method: 'post',
    path: `${ADMIN_PREFIX}/keys`,
    operationId: 'issueKey',
    summary: 'Issue an API key (the plaintext key is returned only this once)',
    tags: ['admin'],
    security: 'admin',
    requestBody: [{ contentType: 'application/json', schema: issueKeyBody, required: false }],
    responses: {
      '201': { description: 'Key issued', schema: adminEnvelope(keyRecordSchema) },
      ...errors(['400', '401', '500']),
    },
  });
  deps.openapi.add({
    method: 'get',
    path: `${ADMIN_PREFIX}/keys`,
    operationId: 'listKeys',
    summary: 'List keys, optionally of one owner',
    tags: ['admin'],
    security: 'admin',
    parameters: [
      { name: 'owner_id', in: 'query', required: false, schema: listKeysQuery.properties.owner_id },
    ],
    responses: {
      '200': {
        description: 'Key records without plaintext',
        schema: adminEnvelope({ type: 'array', items: keyRecordSchema }),
      },
      ...errors(['400', '401', '500']),
    },
  });
  deps.openapi.add({
    method: 'get',
    path: `${ADMIN_PREFIX}/keys/{id}`,
    operationId: 'getKey',
    summary: 'Inspect a key',
    tags: ['admin'],
    security: 'admin',
    parameters: [idParam],
    responses: {
      '200': { description: 'Key record', schema: adminEnvelope(keyRecordSchema) },
      ...errors(['401', '404', '500']),
    },
  });
  deps.openapi.add({
    method: 'delete',
    path: `${ADMIN_PREFIX}/keys/{id}`,
    operationId: 'revokeKey',
    summary: 'Revoke a key (idempotent); answers the revoked key record with status "revoked"',
    tags: ['admin'],
    security: 'admin',
    parameters: [idParam],
    responses: {
      '200': { description: 'Revoked key record', schema: adminEnvelope(keyRecordSchema) },
      ...errors(['401', '404', '500']),
    },
  });
}
