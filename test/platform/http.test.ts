import { expect } from 'chai';
import http from 'node:http';
import request from 'supertest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { createTestApp, issueKey, type TestApp, ADMIN_TOKEN, SESSION_SECRET } from '../helpers/app.js';
import { startApi } from '../../api/server.js';
import { createLogger } from '../../shared/logger.js';
import { ConfigError, loadConfig } from '../../shared/config/index.js';
import type { AddressInfo } from 'node:net';

/** /readyz is 503 while the speech engine loads its models; wait for it. */
async function waitReady(
  server: Parameters<typeof request>[0],
  timeoutMs = 20_000,
): Promise<request.Response> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const res = await request(server).get('/readyz');
    if (res.status === 200 || Date.now() > until) return res;
    expect(res.status).to.equal(503);
    expect(res.body.reason).to.be.a('string');
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('public endpoints, docs and request handling', () => {
  let t: TestApp;
  before(async () => {
    t = await createTestApp();
  });
  after(() => t.close());

  it('GET /health answers {ok, service}', async () => {
    const res = await request(t.server).get('/health').expect(200);
    expect(res.body).to.deep.equal({ ok: true, service: t.config.serviceName });
  });

  it('GET /readyz answers 200 with the checks it ran once the speech engine is loaded', async () => {
    const res = await waitReady(t.server);
    expect(res.body.ok).to.equal(true);
    expect(res.body.checks.database).to.equal(true);
    expect(res.body.checks.speech).to.equal(true);
  });

  it('GET /openapi.json is a valid OpenAPI 3.1 document, version 0.1.0, built from the request schemas', async () => {
    const res = await request(t.server).get('/openapi.json').expect(200).expect('Content-Type', /json/);
    expect(res.body.openapi).to.match(/^3\.1\./);
    expect(res.body.info.version).to.equal('0.1.0');
    const result = await new Validator().validate(res.body);
    expect(result.valid, JSON.stringify(result.errors, null, 1)).to.equal(true);
    const issue = res.body.paths['/v1/external-transcription/keys'].post;
    expect(issue.requestBody.content['application/json'].schema.properties).to.have.keys(
      'owner_id',
      'plan',
      'label',
      'expires_at',
    );
    for (const p of [
      '/health',
      '/readyz',
      '/v1/external-transcription/plans',
      '/v1/audio/transcriptions/session-token',
    ]) {
      expect(res.body.paths).to.have.property(p);
    }
  });

  it('GET /docs serves the interactive documentation page', async () => {
    const res = await request(t.server).get('/docs').expect(200).expect('Content-Type', /html/);
    expect(res.text).to.include('swagger').and.include('/openapi.json');
    // Everything the page loads comes from this service (works offline, tells no third party).
    const urls = [...res.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(urls.filter((u) => /^(https?:)?\/\//.test(u))).to.deep.equal([]);
    for (const u of urls.filter((x) => x.startsWith('/docs/assets/'))) {
      const asset = await request(t.server).get(u).expect(200);
      expect(
        Number(asset.headers['content-length'] ?? asset.body.length ?? asset.text.length),
      ).to.be.greaterThan(0);
    }
    expect(urls).to.include.members(['/docs/assets/swagger-ui-bundle.js', '/docs/assets/swagger-ui.min.css']);
    await request(t.server).get('/docs/assets/package.json').expect(404);
    await request(t.server).get('/docs/assets/..%2Fpackage.json').expect(404);
  });

  it('answers unknown routes and methods with JSON errors', async () => {
    const res = await request(t.server).get('/no/such/thing').expect(404).expect('Content-Type', /json/);
    expect(res.body.error).to.include({ code: 'not_found' });
    // A known path with another method is an unknown route too (interface 4, 7.2: 404 `not_found`, no 405).
    const m = await request(t.server).put('/health').expect(404).expect('Content-Type', /json/);
    expect(m.body.error).to.include({ code: 'not_found' });
    expect(m.headers).to.not.have.property('allow');
    const admin = await request(t.server)
      .put('/v1/external-transcription/keys')
      .set('Authorization', `Bearer ${ADMIN_TOKEN}`)
      .expect(404);
    expect(admin.body).to.deep.include({ ok: false });
    expect(admin.body.error).to.include({ code: 'not_found', retryable: false });
  });

  it('echoes a caller X-Request-Id and makes one up otherwise; the log line carries it', async () => {
    const res = await request(t.server).get('/health').set('X-Request-Id', 'req-abc-123').expect(200);
    expect(res.headers['x-request-id']).to.equal('req-abc-123');
    const gen = await request(t.server).get('/health').expect(200);
    expect(gen.headers['x-request-id']).to.match(/^[0-9a-f-]{36}$/);
    const line = t.logs.lines.map((l) => JSON.parse(l)).find((l) => l.reqId === 'req-abc-123');
    expect(line).to.include({ method: 'GET', path: '/health', status: 200 });
    const junk = await request(t.server)
      .get('/health')
      .set('X-Request-Id', 'bad id\twith spaces')
      .expect(200);
    expect(junk.headers['x-request-id']).not.to.include(' ');
  });

  it('never writes a key, token or secret to the log', async () => {
    const { key } = await issueKey(t);
    const issued = await request(t.server)
      .post('/v1/external-transcription/keys')
      .set('Authorization', `Bearer ${ADMIN_TOKEN}`)
      .send({ owner_id: 'log-check' })
      .expect(201);
    const token = (
      await request(t.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .expect(200)
    ).body.token;
    await request(t.server).get(`/health?access_token=${token}&key=${key}`).expect(200);
    await request(t.server)
      .post('/v1/audio/transcriptions/session-token')
      .set('Authorization', `Bearer ${key}x`)
      .expect(401);
    await request(t.server)
      .get('/v1/external-transcription/keys')
      .set('Authorization', 'Bearer wrong-admin-token-value')
      .expect(401);
    // A key or token pasted as the request id (it is on every line of the request): replaced, not logged.
    for (const id of [key, token]) {
      const res = await request(t.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('X-Request-Id', id)
        .set('Authorization', 'Bearer sk-unknown-key-for-a-refusal')
        .expect(401);
      expect(res.headers['x-request-id']).to.match(/^[0-9a-f-]{36}$/);
    }
    t.deps.logger.info(
      { key, token, authorization: `Bearer ${key}` },
      `something mentioned ${key} and ${token}`,
    );
    t.deps.logger.error({ err: new Error(`failed for ${key}`) }, 'error with a key');
    const text = t.logs.text;
    expect(text.length).to.be.greaterThan(0);
    for (const secret of [key, token, issued.body.data.key, ADMIN_TOKEN, SESSION_SECRET, key.slice(3)]) {
      expect(text).not.to.include(secret);
    }
  });
});

describe('graceful shutdown', () => {
  it('stops accepting, lets a request in flight finish, then closes pools', async () => {
    // A readiness check that takes a while once armed: a request in flight when the stop begins.
    let armed = false;
    let delayed = false;
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    const slow = {
      name: 'slow',
      check: () => {
        if (!armed) return Promise.resolve(true);
        entered();
        return new Promise<boolean>((r) => setTimeout(() => ((delayed = true), r(true)), 300));
      },
    };
    const t = await createTestApp({}, { deps: { readiness: [slow] } });
    const config = {
      ...t.config,
      http: { ...t.config.http, port: 0, host: '127.0.0.1', shutdownGraceMs: 5000 },
    };
    const api = await startApi(config, createLogger({ level: 'silent' }), { deps: t.deps });
    await waitReady(api.server);
    armed = true;
    const req = http.get(`http://127.0.0.1:${api.port}/readyz`);
    const response = new Promise<number>((resolve, reject) => {
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
    });
    await inHandler; // the request is being handled when the stop begins
    const stopped = api.stop();
    expect(await response).to.equal(200);
    expect(delayed).to.equal(true);
    await stopped;
    const port = (api.server.address() as AddressInfo | null)?.port;
    expect(port).to.equal(undefined);
    await new Promise<void>((resolve) => {
      http.get(`http://127.0.0.1:${api.port}/health`).on('error', () => resolve());
    });
    // The pool is closed: queries now fail.
    let failed = false;
    await t.deps.db.raw('select 1').catch(() => (failed = true));
    expect(failed).to.equal(true);
    await t.db.drop();
  });
});

describe('draining before shutdown (SHUTDOWN_DRAIN_DELAY_MS)', () => {
  it('readiness turns 503 at once while requests are still served, then the server stops', async () => {
    const t = await createTestApp();
    const config = {
      ...t.config,
      http: { ...t.config.http, port: 0, host: '127.0.0.1', drainDelayMs: 1500 },
    };
    const api = await startApi(config, createLogger({ level: 'silent' }), { deps: t.deps });
    await waitReady(api.server);
    const base = `http://127.0.0.1:${api.port}`;
    expect((await fetch(`${base}/readyz/instance`)).status).to.equal(200);
    const stopped = api.stop();
    const ready = await fetch(`${base}/readyz/instance`);
    expect(ready.status).to.equal(503);
    expect(((await ready.json()) as { checks: Record<string, boolean> }).checks.accepting).to.equal(false);
    // Still serving while the load balancer takes it out of rotation.
    expect((await fetch(`${base}/health`)).status).to.equal(200);
    await stopped;
    let refused = false;
    await fetch(`${base}/health`).catch(() => (refused = true));
    expect(refused).to.equal(true);
    await t.db.drop();
  });
});

describe('configuration bounds that keep the interface promises', () => {
  it('keeps the key cache within 2 s and session tokens at 60 s, and refuses a pool of one connection', () => {
    // Internal tuning, not variables: an operator cannot break the revocation delay or the token lifetime.
    const c = loadConfig({ AUTH_CACHE_TTL_MS: '5000', SESSION_TOKEN_TTL_SECONDS: '3600' });
    expect(c.auth.keyCacheTtlMs).to.be.at.most(2000);
    expect(c.auth.sessionTokenTtlSeconds).to.equal(60);
    expect(() => loadConfig({ DB_POOL_MAX: '1' })).to.throw(ConfigError, /DB_POOL_MAX/);
    expect(loadConfig({ DB_POOL_MAX: '2' }).dbPoolMax).to.equal(2);
  });
});
