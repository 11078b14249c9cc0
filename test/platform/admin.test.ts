import { expect } from 'chai';
import request from 'supertest';
import { ADMIN_TOKEN, createTestApp, type TestApp } from '../helpers/app.js';
import { hashApiKey } from '../../shared/auth/keys.js';
import { BUILTIN_PLANS, PlanCatalog } from '../../shared/plans.js';

const KEYS = '/v1/external-transcription/keys';
const admin = { Authorization: `Bearer ${ADMIN_TOKEN}` };

describe('admin API', () => {
  let t: TestApp;
  before(async () => {
    t = await createTestApp();
  });
  after(async () => {
    await t.close();
  });

  it('serves the public plan catalog with the free limits of section 8', async () => {
    const res = await request(t.server).get('/v1/external-transcription/plans').expect(200);
    expect(res.body.ok).to.equal(true);
    const free = res.body.data.find((p: { plan: string }) => p.plan === 'free');
    expect(free.limits).to.deep.equal({
      maxConcurrentConnections: 1,
      maxConcurrentUtterances: 2,
      maxConnectionsPerMinute: 6,
      maxRequestsPerMinute: 12,
      maxAudioSecondsPerRequest: 900,
      maxSessionSeconds: 900,
      maxAudioSecondsPerSession: 900,
      maxAudioSecondsPerWindow: 3600,
      idleTimeoutSeconds: 60,
    });
    expect(res.body.data.map((p: { plan: string }) => p.plan)).to.include('pro');
  });

  it('PLANS_JSON changes pro and adds plans, but never free, and refuses unknown limit names', () => {
    const catalog = new PlanCatalog({
      pro: { maxRequestsPerMinute: 900 },
      team: { maxConcurrentConnections: 5 },
    });
    expect(catalog.limits('pro').maxRequestsPerMinute).to.equal(900);
    expect(catalog.limits('team')).to.deep.equal({ ...BUILTIN_PLANS.free, maxConcurrentConnections: 5 });
    expect(catalog.limits('free')).to.deep.equal(BUILTIN_PLANS.free);
    expect(() => new PlanCatalog({ free: { maxRequestsPerMinute: 1000 } })).to.throw(/"free" plan is fixed/);
    expect(() => new PlanCatalog({ team: { maxRequestPerMinute: 5 } as object })).to.throw(
      /unknown field\(s\) maxRequestPerMinute/,
    );
    expect(() => new PlanCatalog({ team: { maxRequestsPerMinute: -1 } })).to.throw(/non-negative integer/);
    expect(() => new PlanCatalog({ 'bad name': {} })).to.throw(/plan name/);
  });

  it('issues a key once in plaintext and stores only its SHA-256 hash', async () => {
    const res = await request(t.server)
      .post(KEYS)
      .set(admin)
      .send({ owner_id: 'acme', plan: 'pro', label: 'ci' })
      .expect(201);
    const d = res.body.data;
    expect(res.body.ok).to.equal(true);
    expect(d.key).to.match(/^sk-[A-Za-z0-9]{32,}$/);
    expect(d.keyPrefix)
      .to.equal(d.key.slice(0, 12))
      .and.match(/^sk-.{9}$/);
    expect(d.lastFour).to.equal(d.key.slice(-4));
    expect(d).to.include({
      ownerId: 'acme',
      plan: 'pro',
      status: 'active',
      label: 'ci',
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: null,
    });
    expect(d.limits.maxRequestsPerMinute).to.be.a('number');
    expect(new Date(d.createdAt).toISOString()).to.equal(d.createdAt);

    const rows = await t.deps.db('api_keys').where('id', d.id);
    expect(rows).to.have.length(1);
    expect(rows[0].key_hash).to.equal(hashApiKey(d.key));
    expect(JSON.stringify(rows[0])).not.to.include(d.key);

    const got = await request(t.server).get(`${KEYS}/${d.id}`).set(admin).expect(200);
    expect(got.body.data).not.to.have.property('key');
    expect(got.body.data.id).to.equal(d.id);
  });

  it('defaults owner to "default" and plan to free; accepts an empty body', async () => {
    const res = await request(t.server).post(KEYS).set(admin).expect(201);
    expect(res.body.data).to.include({ ownerId: 'default', plan: 'free' });
  });

  it('lists keys without plaintext, filtered by owner_id', async () => {
    await request(t.server).post(KEYS).set(admin).send({ owner_id: 'list-a' }).expect(201);
    await request(t.server).post(KEYS).set(admin).send({ owner_id: 'list-b' }).expect(201);
    const res = await request(t.server).get(`${KEYS}?owner_id=list-a`).set(admin).expect(200);
    expect(res.body.data).to.have.length(1);
    expect(res.body.data[0].ownerId).to.equal('list-a');
    expect(res.body.data[0]).not.to.have.property('key');
    const all = await request(t.server).get(KEYS).set(admin).expect(200);
    expect(all.body.data.length).to.be.greaterThan(1);
  });

  it('revokes with DELETE, answering the record with status "revoked", idempotently', async () => {
    const issued = (await request(t.server).post(KEYS).set(admin).send({}).expect(201)).body.data;
    const del = await request(t.server).delete(`${KEYS}/${issued.id}`).set(admin).expect(200);
    expect(del.body.ok).to.equal(true);
    expect(del.body.data.status).to.equal('revoked');
    expect(del.body.data.revokedAt).to.be.a('string');
    const again = await request(t.server).delete(`${KEYS}/${issued.id}`).set(admin).expect(200);
    expect(again.body.data.revokedAt).to.equal(del.body.data.revokedAt);
  });

  it('records expires_at and reports expired keys', async () => {
    const at = new Date(Date.now() + 3600_000).toISOString();
    const res = await request(t.server)
      .post(KEYS)
      .set(admin)
      .send({ expires_at: at, owner_id: 'expiring' })
      .expect(201);
    expect(res.body.data.expiresAt).to.equal(at);
    expect(res.body.data.status).to.equal('active');
    // Time passes: the key is past its expiry.
    await t.deps
      .db('api_keys')
      .where({ id: res.body.data.id })
      .update({ expires_at: new Date(Date.now() - 1000) });
    const got = await request(t.server).get(`${KEYS}/${res.body.data.id}`).set(admin).expect(200);
    expect(got.body.data.status).to.equal('expired');
    const listed = await request(t.server).get(`${KEYS}?owner_id=expiring`).set(admin).expect(200);
    expect(listed.body.data.map((k: { status: string }) => k.status)).to.deep.equal(['expired']);
  });

  describe('errors in the admin envelope', () => {
    const envelope = (body: any, code: string) => {
      expect(body.ok).to.equal(false);
      expect(body.error.code).to.equal(code);
      expect(body.error.message)
        .to.be.a('string')
        .and.not.match(/at .*\.ts:\d+/);
      expect(body.error.retryable).to.be.a('boolean');
    };

    it('401 admin_unauthorized for a missing, wrong or non-Bearer token', async () => {
      envelope((await request(t.server).get(KEYS).expect(401)).body, 'admin_unauthorized');
      envelope(
        (await request(t.server).get(KEYS).set('Authorization', 'Bearer nope').expect(401)).body,
        'admin_unauthorized',
      );
      envelope(
        (await request(t.server).get(KEYS).set('Authorization', `Basic ${ADMIN_TOKEN}`).expect(401)).body,
        'admin_unauthorized',
      );
      envelope((await request(t.server).post(KEYS).send({}).expect(401)).body, 'admin_unauthorized');
    });

    it('400 invalid_plan for an unknown plan', async () => {
      envelope(
        (await request(t.server).post(KEYS).set(admin).send({ plan: 'gold' }).expect(400)).body,
        'invalid_plan',
      );
    });

    it('404 key_not_found for unknown or odd ids', async () => {
      envelope(
        (await request(t.server).get(`${KEYS}/key_nope`).set(admin).expect(404)).body,
        'key_not_found',
      );
      // An id that cannot be one (issued ids are key_ and 24 hex digits) is not echoed: before,
      // `nonsense` was looked up and came back in the message.
      for (const id of ['nonsense', 'key_nope', 'key_0123456789abcdef0123456']) {
        const res = await request(t.server).get(`${KEYS}/${id}`).set(admin).expect(404);
        expect(res.body.error.message, id).to.equal('No key with that id.');
      }
      const unknown = 'key_' + '0'.repeat(24);
      expect(
        (await request(t.server).get(`${KEYS}/${unknown}`).set(admin).expect(404)).body.error.message,
      ).to.equal(`No key with id "${unknown}".`);
      envelope(
        (await request(t.server).delete(`${KEYS}/%27%3Bdrop`).set(admin).expect(404)).body,
        'key_not_found',
      );
      // A NUL byte (Postgres text cannot hold it) or a huge id: not found, not echoed, never a 500.
      for (const id of ['%00', 'key_%00x', 'k'.repeat(5000)]) {
        for (const method of ['get', 'delete'] as const) {
          const res = await request(t.server)[method](`${KEYS}/${id}`).set(admin).expect(404);
          envelope(res.body, 'key_not_found');
          expect(res.body.error.message.length).to.be.below(100);
        }
      }
    });

    it('400 for control characters (NUL included) in owner_id, plan or label, in bodies and queries', async () => {
      for (const body of [
        { owner_id: 'a\u0000b' },
        { label: 'x\u0000' },
        { plan: 'free\u0000' },
        { owner_id: 'a\nb' },
        // Issue 41: lone surrogates (stored as U+FFFD, so two of them were one owner), C1 controls,
        // bidirectional overrides and isolates, line separators.
        { owner_id: 'lone\ud800' },
        { owner_id: 'lone\udfff' },
        { owner_id: 'a\u0085b' },
        { owner_id: 'a\u202eb' },
        { owner_id: 'a\u2066b' },
        { label: 'x\u2028y' },
        { label: 'x\u009by' },
        { owner_id: 'default:key_0123' },
      ]) {
        envelope(
          (await request(t.server).post(KEYS).set(admin).send(body).expect(400)).body,
          'invalid_request',
        );
      }
      envelope(
        (await request(t.server).get(`${KEYS}?owner_id=%00`).set(admin).expect(400)).body,
        'invalid_request',
      );
    });

    it('404 not_found for unknown admin routes', async () => {
      envelope(
        (await request(t.server).get('/v1/external-transcription/nope').set(admin).expect(404)).body,
        'not_found',
      );
    });

    it('400 for non-JSON, wrong types, unknown fields, bad dates; 413 for oversized bodies', async () => {
      const bad = async (req: request.Test, status: number, code: string) =>
        envelope((await req.expect(status)).body, code);
      await bad(
        request(t.server).post(KEYS).set(admin).set('Content-Type', 'application/json').send('{nope'),
        400,
        'invalid_json',
      );
      await bad(
        request(t.server).post(KEYS).set(admin).set('Content-Type', 'text/plain').send('hello'),
        400,
        'invalid_json',
      );
      await bad(request(t.server).post(KEYS).set(admin).send([1, 2]), 400, 'invalid_json');
      // Valid JSON that is not an object is called what it is, not "not valid JSON"; so is a __proto__ field.
      const raw: [string, string, RegExp][] = [
        ...['null', '7', '"keys"', '[1, 2]'].map((b): [string, string, RegExp] => [
          b,
          'invalid_json',
          /^The request body must be a JSON object\.$/,
        ]),
        ['{"__proto__": {"plan": "pro"}}', 'invalid_request', /__proto__/],
        ['{"label": "x", "__proto__": null}', 'invalid_request', /__proto__/],
      ];
      // Any +json type the route admits is parsed (merge-patch was read as an empty body).
      for (const type of ['application/merge-patch+json', 'application/foo+json; charset=utf-8'])
        await request(t.server)
          .post(KEYS)
          .set(admin)
          .set('Content-Type', type)
          .send('{"owner_id": "plus-json"}')
          .expect(201);
      for (const [body, code, message] of raw) {
        const res = await request(t.server)
          .post(KEYS)
          .set(admin)
          .set('Content-Type', 'application/json')
          .send(body)
          .expect(400);
        envelope(res.body, code);
        expect(res.body.error.message, body).to.match(message);
      }
      await bad(request(t.server).post(KEYS).set(admin).send({ plan: 7 }), 400, 'invalid_request');
      const typed = await request(t.server).post(KEYS).set(admin).send({ owner_id: 5 }).expect(400);
      expect(typed.body.error.message).to.equal('Field "owner_id" must be of type string.');
      await bad(request(t.server).post(KEYS).set(admin).send({ colour: 'red' }), 400, 'invalid_request');
      await bad(
        request(t.server).post(KEYS).set(admin).send({ expires_at: 'tomorrow' }),
        400,
        'invalid_request',
      );
      await bad(
        request(t.server).post(KEYS).set(admin).send({ expires_at: '2001-01-01T00:00:00Z' }),
        400,
        'invalid_request',
      );
      await bad(request(t.server).get(`${KEYS}?owner_id=a&owner_id=b`).set(admin), 400, 'invalid_request');
      await bad(
        request(t.server)
          .post(KEYS)
          .set(admin)
          .send({ label: 'x'.repeat(2 * 1024 * 1024) }),
        413,
        'payload_too_large',
      );
    });
  });
});

describe('admin API: wrong tokens are throttled per client address', () => {
  let t: TestApp;
  before(async () => {
    t = await createTestApp({ ADMIN_AUTH_FAILURES_PER_MINUTE: '5' });
  });
  after(() => t.close());

  it('answers 401 for the first wrong tokens, then 429 with Retry-After, even for the right token', async () => {
    for (let i = 0; i < 5; i++)
      await request(t.server).get(KEYS).set('Authorization', `Bearer wrong-${i}`).expect(401);
    const r = await request(t.server).get(KEYS).set('Authorization', 'Bearer wrong-again').expect(429);
    expect(r.body.ok).to.equal(false);
    expect(r.body.error.code).to.equal('rate_limit_exceeded');
    expect(Number(r.headers['retry-after'])).to.be.within(1, 60);
    // The right token does not help a throttled address (a guesser learns nothing from the answers).
    await request(t.server).get(KEYS).set(admin).expect(429);
    await request(t.server).get('/v1/external-transcription/owners/acme/usage').set(admin).expect(429);
  });
});
