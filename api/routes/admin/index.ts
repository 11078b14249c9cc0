/**
 * Operator admin API (interface 4.11): the public plan catalog and key
 * management behind the admin token, all in the `{ok, data}` envelope.
 */
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';
import { IdempotencyConflict, type KeyRow } from '../../../shared/auth/index.js';
import { requireAdmin } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, isDataException, isStoreUnavailable, usePlane } from '../../http/errors.js';
import { DEPENDENCY_RETRY_AFTER_SECONDS } from '../../../shared/config/platform.js';
import type { OperationDoc, Route } from '../../http/routes.js';
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

/** 500 as the interface fixes for the admin plane, with the Retry-After every dependency failure carries. */
const storeUnavailable = () =>
  new ApiError(500, 'store_unavailable', 'The key store is unavailable; try again shortly.', {
    retryable: true,
    headers: { 'Retry-After': String(DEPENDENCY_RETRY_AFTER_SECONDS) },
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

/** The admin error envelope under each of these statuses. */
export const adminErrors = (codes: string[]) =>
  Object.fromEntries(codes.map((c) => [c, { description: 'Error envelope', schema: adminErrorSchema }]));

/** An operation of the admin API (tag `admin`, admin token unless `security` says otherwise). */
export function adminDoc(doc: Omit<OperationDoc, 'tags' | 'security'> & { security?: 'none' }): OperationDoc {
  return { ...doc, tags: ['admin'], security: doc.security ?? 'admin' };
}

export function routes(deps: AppDeps): Route[] {
  const { config, keys, plans, auth } = deps;
  const admin = requireAdmin(config.auth);
  const plane = usePlane('admin');
  const idParam = pathParam('id', keyIdParam, 'Key id');

  // The catalog is fixed for the life of the process: serialise it once.
  const catalog = JSON.stringify({ ok: true, data: plans.list() });

  // An id that cannot be a key id is simply not found (and is not echoed back).
  const validKeyId = compile(keyIdParam);
  const notFound = (id: string) =>
    new ApiError(404, 'key_not_found', validKeyId(id) ? `No key with id "${id}".` : 'No key with that id.');

  /** GET and DELETE /keys/{id}: the key record, after `then` (revocation) when given. */
  const keyRoute = (
    method: 'get' | 'delete',
    op: {
      find: (id: string) => Promise<KeyRow | undefined>;
      then?: (ctx: Context, row: KeyRow) => void | Promise<void>;
      operationId: string;
      summary: string;
      answer: string;
    },
  ): Route => ({
    method,
    path: `${ADMIN_PREFIX}/keys/:id`,
    chain: [
      plane,
      admin,
      async (ctx) => {
        const id = ctx.params.id;
        const row = validKeyId(id) ? await guardStore(() => op.find(id)) : undefined;
        if (!row) throw notFound(id);
        await op.then?.(ctx, row);
        ok(ctx, keys.present(row));
      },
    ],
    doc: adminDoc({
      operationId: op.operationId,
      summary: op.summary,
      parameters: [idParam],
      responses: {
        '200': { description: op.answer, schema: adminEnvelope(keyRecordSchema) },
        ...adminErrors(['401', '404', '500']),
      },
    }),
  });

  return [
    {
      method: 'get',
      path: `${ADMIN_PREFIX}/plans`,
      chain: [
        plane,
        (ctx) => {
          ctx.type = 'application/json';
          ctx.body = catalog;
        },
      ],
      doc: adminDoc({
        operationId: 'listPlans',
        summary: 'Plan catalog (public)',
        security: 'none',
        responses: {
          '200': {
            description: 'Plans and their limits',
            schema: adminEnvelope({ type: 'array', items: planSchema }),
          },
        },
      }),
    },
    {
      method: 'post',
      path: `${ADMIN_PREFIX}/keys`,
      chain: [
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
          const idempotencyKey = ctx.get('idempotency-key') || undefined;
          if (idempotencyKey !== undefined && !/^[\x21-\x7e]{1,255}$/.test(idempotencyKey))
            throw new ApiError(
              400,
              'invalid_request',
              'Header "Idempotency-Key" must be 1 to 255 printable ASCII characters.',
            );
          try {
            const { replaced, ...record } = await keys.issue({
              // Stored as compared: one spelling of each owner (NFC), so two spellings cannot be two tenants.
              ownerId: body.owner_id.normalize('NFC'),
              plan,
              label: body.label,
              expiresAt,
              idempotencyKey,
            });
            if (replaced) {
              auth.invalidate(replaced);
              ctx.set('Idempotent-Replayed', 'true');
            }
            ctx.state.log.info(
              { keyId: record.id, ownerId: record.ownerId, plan, replayed: Boolean(replaced) },
              'api key issued',
            );
            ok(ctx, record, 201);
          } catch (err) {
            if (err instanceof IdempotencyConflict)
              throw new ApiError(409, 'idempotency_key_reused', err.message);
            if (isStoreUnavailable(err)) throw storeUnavailable();
            if (isDataException(err)) throw err; // the input's fault: 400 from the error middleware
            ctx.state.log.error({ err }, 'key issue failed');
            throw new ApiError(500, 'issue_failed', 'The key could not be issued.', { retryable: true });
          }
        },
      ],
      doc: adminDoc({
        operationId: 'issueKey',
        summary: 'Issue an API key (the plaintext key is returned only this once)',
        parameters: [
          {
            name: 'Idempotency-Key',
            in: 'header',
            required: false,
            description:
              'Makes a retry safe: the same request with the same value answers the same key (a new secret) instead of issuing a second one.',
            schema: { type: 'string', minLength: 1, maxLength: 255 },
          },
        ],
        requestBody: [{ contentType: 'application/json', schema: issueKeyBody, required: false }],
        responses: {
          '201': {
            description:
              'Key issued. With an `Idempotency-Key` header already used for the same request: the same key (same id) with a new secret, the earlier one revoked, and `Idempotent-Replayed: true`.',
            schema: adminEnvelope(keyRecordSchema),
          },
          '409': {
            description:
              '`idempotency_key_reused`: the Idempotency-Key was used for a different request, or its key is no longer active.',
            schema: adminErrorSchema,
          },
          ...adminErrors(['400', '401', '500']),
        },
      }),
    },
    {
      method: 'get',
      path: `${ADMIN_PREFIX}/keys`,
      chain: [
        plane,
        admin,
        validateQuery(listKeysQuery),
        async (ctx) => {
          const { owner_id } = ctx.state.query as { owner_id?: string };
          ok(ctx, await guardStore(() => keys.list({ ownerId: owner_id?.normalize('NFC') })));
        },
      ],
      doc: adminDoc({
        operationId: 'listKeys',
        summary: 'List keys, optionally of one owner',
        parameters: [
          { name: 'owner_id', in: 'query', required: false, schema: listKeysQuery.properties.owner_id },
        ],
        responses: {
          '200': {
            description: 'Key records without plaintext',
            schema: adminEnvelope({ type: 'array', items: keyRecordSchema }),
          },
          ...adminErrors(['400', '401', '500']),
        },
      }),
    },
    keyRoute('get', {
      find: (id) => keys.get(id),
      operationId: 'getKey',
      summary: 'Inspect a key',
      answer: 'Key record',
    }),
    keyRoute('delete', {
      find: (id) => keys.revoke(id),
      then: async (ctx, row) => {
        auth.invalidate(row);
        // Its queued and running batch jobs end too: nothing more runs or is billed for a revoked key.
        const jobs = await guardStore(() => deps.batch.cancelKeyJobs(row.id));
        ctx.state.log.info({ keyId: row.id, jobsTerminated: jobs }, 'api key revoked');
      },
      operationId: 'revokeKey',
      summary:
        'Revoke a key (idempotent); its queued and running batch jobs are terminated. Answers the revoked key record with status "revoked"',
      answer: 'Revoked key record',
    }),
  ];
}
