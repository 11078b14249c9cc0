/**
 * Every number a client sends is bounded on both sides by its schema (issue
 * 41): JSON's `1e309` parses as Infinity, and a number field with only a
 * lower bound let one batch request (`segment_seconds: 1e309`) stop every API
 * process. This walks every request body, query and path parameter of the
 * OpenAPI document and the realtime `session.update` schema, and sends
 * `1e309` to the batch fields.
 */
import { expect } from 'chai';
import request from 'supertest';
import { sessionUpdateSchema } from '../../shared/sessionUpdate/native.js';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';

type Schema = Record<string, unknown>;

/** Paths (JSON pointers) of number schemas without a finite upper and lower bound. */
function unbounded(
  schema: unknown,
  at: string,
  resolve: (ref: string) => unknown,
  seen = new Set<unknown>(),
): string[] {
  if (!schema || typeof schema !== 'object' || seen.has(schema)) return [];
  seen.add(schema);
  const s = schema as Schema;
  if (typeof s.$ref === 'string') return unbounded(resolve(s.$ref), at, resolve, seen);
  const out: string[] = [];
  const types = ([] as unknown[]).concat(s.type ?? []);
  if (types.includes('number') || types.includes('integer')) {
    const hi =
      Number.isFinite(s.maximum) || Number.isFinite(s.exclusiveMaximum) || s.enum || s.const !== undefined;
    const lo =
      Number.isFinite(s.minimum) || Number.isFinite(s.exclusiveMinimum) || s.enum || s.const !== undefined;
    if (!hi || !lo) out.push(at);
  }
  for (const [k, v] of Object.entries(s.properties ?? {}))
    out.push(...unbounded(v, `${at}/${k}`, resolve, seen));
  for (const k of ['items', 'additionalProperties'] as const)
    out.push(...unbounded(s[k], `${at}/${k}`, resolve, seen));
  for (const k of ['oneOf', 'anyOf', 'allOf'] as const)
    for (const [i, v] of ((s[k] as unknown[]) ?? []).entries())
      out.push(...unbounded(v, `${at}/${k}/${i}`, resolve, seen));
  return out;
}

describe('surface: every number a client sends is bounded', function () {
  this.timeout(30_000);
  let t: TestApp;
  let key: string;
  before(async () => {
    t = await createTestApp({ BATCH_WORKERS: 'false' });
    key = (await issueKey(t, { ownerId: 'tenant-bounds', plan: 'pro' })).key;
  });
  after(async () => t?.close());

  it('in every request body, query and path parameter of the OpenAPI document', async () => {
    const doc = (await request(t.server).get('/openapi.json')).body as Schema;
    const resolve = (ref: string) =>
      ref
        .replace(/^#\//, '')
        .split('/')
        .reduce<unknown>((o, k) => (o as Schema)?.[k], doc);
    const found: string[] = [];
    let inputs = 0;
    for (const [p, ops] of Object.entries(doc.paths as Record<string, Record<string, Schema>>)) {
      for (const [method, op] of Object.entries(ops)) {
        for (const param of (op.parameters as Schema[] | undefined) ?? []) {
          inputs++;
          found.push(
            ...unbounded(
              ((resolve((param.$ref as string) ?? '') as Schema) ?? param).schema,
              `${method} ${p} ${String(param.name)}`,
              resolve,
            ),
          );
        }
        const content = ((op.requestBody as Schema | undefined)?.content ?? {}) as Record<string, Schema>;
        for (const [type, c] of Object.entries(content)) {
          inputs++;
          found.push(...unbounded(c.schema, `${method} ${p} (${type})`, resolve));
        }
      }
    }
    expect(inputs).to.be.greaterThan(10);
    expect(found).to.deep.equal([]);
  });

  it('in the realtime session.update options', () => {
    expect(unbounded(sessionUpdateSchema, 'session.update', () => undefined)).to.deep.equal([]);
  });

  for (const field of ['segment_seconds', 'concurrency']) {
    it(`400 for ${field}: 1e309 (Infinity once parsed), never queued`, async () => {
      const r = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .set('content-type', 'application/json')
        .send(`{"audio_url":"https://example.com/a.wav","${field}":1e309}`);
      expect(r.status).to.equal(400);
      expect(r.body).to.deep.include({ code: 'invalid_request' });
      expect(r.body.error).to.include(field);
      expect(await t.deps.db('batch_workflows').count('* as n').first()).to.deep.equal({ n: '0' });
    });
  }
});
