import { expect } from 'chai';
import request from 'supertest';
import { createTestApp, issueKey, type TestApp, SESSION_SECRET } from '../helpers/app.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueSessionToken, verifySessionToken } from '../../shared/auth/sessionTokens.js';

const TOKEN = '/v1/audio/transcriptions/session-token';
const bearer = (k: string) => ({ Authorization: `Bearer ${k}` });

describe('authentication of transcription routes (shared/auth)', () => {
  let db: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  before(async () => {
    db = await createTestDatabase();
    // Two instances on one database, as behind a load balancer.
    a = await createTestApp({}, { db, overrides: { auth: { lastUsedFlushMs: 100 } } });
    b = await createTestApp({}, { db });
  });
  after(async () => {
    await a.close();
    await b.close();
    await db.drop();
  });

  const codeOf = (res: request.Response) => res.body.error?.code;

  it('refuses a missing key (missing_api_key), a wrong scheme or malformed/unknown key (invalid_api_key)', async () => {
    expect(codeOf(await request(a.server).post(TOKEN).expect(401))).to.equal('missing_api_key');
    for (const empty of ['Bearer', 'Bearer   ', ' ']) {
      const res = await request(a.server).post(TOKEN).set('Authorization', empty).expect(401);
      expect(codeOf(res), JSON.stringify(empty)).to.equal('missing_api_key');
    }
    const basic = await request(a.server).post(TOKEN).set('Authorization', 'Basic sk-abcdefghijklmnop');
    expect(basic.status).to.equal(401);
    expect(codeOf(basic)).to.equal('invalid_api_key');
    // The message names the scheme the client used (and never the credentials).
    expect(basic.body.error.message).to.include('must use the Bearer scheme').and.include('not Basic');
    expect(basic.body.error.message).to.not.include('sk-abc');
    expect(codeOf(await request(a.server).post(TOKEN).set(bearer('sk-short')).expect(401))).to.equal(
      'invalid_api_key',
    );
    expect(
      codeOf(
        await request(a.server)
          .post(TOKEN)
          .set(bearer('sk-' + 'x'.repeat(40)))
          .expect(401),
      ),
    ).to.equal('invalid_api_key');
    const res = await request(a.server)
      .post(TOKEN)
      .set(bearer('sk-' + 'y'.repeat(40)))
      .expect(401);
    expect(res.body.error).to.include({ type: 'authentication_error' });
    expect(res.headers['www-authenticate']).to.equal('Bearer');
  });

  it('issues rt_ session tokens valid 60 s for the realtime endpoint', async () => {
    const { key } = await issueKey(a);
    const res = await request(a.server).post(TOKEN).set(bearer(key)).expect(200);
    expect(res.body.token).to.match(/^rt_/);
    expect(res.body).to.include({ expires_in: 60, endpoint: '/v1/audio/transcriptions/stream' });
    const verified = await a.deps.auth.authenticateSessionToken(res.body.token);
    expect(verified.ok).to.equal(true);
    // Session tokens are not API keys.
    expect(codeOf(await request(a.server).post(TOKEN).set(bearer(res.body.token)).expect(401))).to.equal(
      'invalid_api_key',
    );
  });

  it('refuses tampered, foreign-signed and expired session tokens with invalid_session_token', async () => {
    const { key, id } = await issueKey(a);
    const { token } = (await request(a.server).post(TOKEN).set(bearer(key))).body;
    const tampered = token.slice(0, -2) + (token.endsWith('A') ? 'BB' : 'AA');
    for (const bad of [
      tampered,
      'rt_garbage',
      issueSessionToken('other-secret', id, 60).token,
      issueSessionToken(SESSION_SECRET, id, 60, Date.now() - 61_000).token,
    ]) {
      const r = await a.deps.auth.authenticateSessionToken(bad);
      expect(r.ok).to.equal(false);
      if (!r.ok) expect(r.code).to.equal('invalid_session_token');
    }
  });

  it('answers 503 token_issuer_unavailable when the signing secret is not configured', async () => {
    const c = await createTestApp({ GATEWAY_SESSION_TOKEN_SECRET: '' }, { db });
    try {
      const { key } = await issueKey(c);
      const res = await request(c.server).post(TOKEN).set(bearer(key)).expect(503);
      expect(codeOf(res)).to.equal('token_issuer_unavailable');
    } finally {
      await c.close();
    }
  });

  it('refuses expired keys with expired_api_key', async () => {
    const { key, id } = await issueKey(a, { expiresAt: new Date(Date.now() + 60_000) });
    await request(a.server).post(TOKEN).set(bearer(key)).expect(200);
    await a.deps
      .db('api_keys')
      .where({ id })
      .update({ expires_at: new Date(Date.now() - 1000) });
    await new Promise((r) => setTimeout(r, a.config.auth.keyCacheTtlMs + 50));
    expect(codeOf(await request(a.server).post(TOKEN).set(bearer(key)).expect(401))).to.equal(
      'expired_api_key',
    );
  });

  it('a key revoked on one instance is refused by every instance within 2 seconds, and so are its tokens', async () => {
    const { key, id } = await issueKey(a);
    const token = (await request(a.server).post(TOKEN).set(bearer(key)).expect(200)).body.token;
    await request(b.server).post(TOKEN).set(bearer(key)).expect(200); // b now holds the key in its cache
    await request(a.server)
      .delete(`/v1/external-transcription/keys/${id}`)
      .set('Authorization', `Bearer ${a.config.auth.adminToken}`)
      .expect(200);
    const revokedAt = Date.now();
    expect(codeOf(await request(a.server).post(TOKEN).set(bearer(key)).expect(401))).to.equal(
      'revoked_api_key',
    );
    let refusedAfter = -1;
    while (Date.now() - revokedAt < 2000) {
      const res = await request(b.server).post(TOKEN).set(bearer(key));
      if (res.status === 401) {
        expect(codeOf(res)).to.equal('revoked_api_key');
        refusedAfter = Date.now() - revokedAt;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(refusedAfter).to.be.within(0, 2000);
    await new Promise((r) => setTimeout(r, b.config.auth.keyCacheTtlMs + 50));
    const viaToken = await b.deps.auth.authenticateSessionToken(token);
    expect(viaToken.ok).to.equal(false);
    if (!viaToken.ok) expect(viaToken.code).to.equal('revoked_api_key');
  });

  it('looks a key up once for all the requests that find its cache entry stale at the same time', async () => {
    const { key } = await issueKey(a, { plan: 'pro' });
    let lookups = 0;
    const count = (q: { sql: string }) => {
      if (q.sql.includes('key_hash')) lookups++;
    };
    a.deps.db.on('query', count);
    try {
      const burst = () =>
        Promise.all(
          Array.from({ length: 20 }, () => request(a.server).post(TOKEN).set(bearer(key)).expect(200)),
        );
      await burst();
      expect(lookups).to.equal(1);
      await new Promise((r) => setTimeout(r, a.config.auth.keyCacheTtlMs + 50));
      await burst();
      expect(lookups).to.equal(2);
    } finally {
      a.deps.db.removeListener('query', count);
    }
  });

  it('looks a busy key up again before its entry expires, so its requests do not wait for the query', async () => {
    const { key } = await issueKey(a, { plan: 'pro' });
    let lookups = 0;
    const count = (q: { sql: string }) => {
      if (q.sql.includes('key_hash')) lookups++;
    };
    const ttl = a.config.auth.keyCacheTtlMs;
    await request(a.server).post(TOKEN).set(bearer(key)).expect(200);
    const loaded = Date.now();
    a.deps.db.on('query', count);
    try {
      await new Promise((r) => setTimeout(r, ttl * 0.85 - (Date.now() - loaded)));
      await request(a.server).post(TOKEN).set(bearer(key)).expect(200); // answered from the entry, refreshed behind it
      await new Promise((r) => setTimeout(r, ttl + 100 - (Date.now() - loaded)));
      expect(lookups).to.equal(1);
      await request(a.server).post(TOKEN).set(bearer(key)).expect(200); // the refreshed entry is still fresh
      expect(lookups).to.equal(1);
    } finally {
      a.deps.db.removeListener('query', count);
    }
  });

  it('keeps lastUsedAt current with batched writes, not one write per request', async () => {
    const { key, id } = await issueKey(a, { plan: 'pro' });
    const before = await a.deps.db('api_keys').where({ id }).first();
    expect(before.last_used_at).to.equal(null);
    // Count the writes rather than time them: a loaded machine stretches requests past the flush interval.
    let writes = 0;
    const count = (q: { sql: string }) => {
      if (/^update\b.*last_used_at/i.test(q.sql)) writes++;
    };
    a.deps.db.on('query', count);
    try {
      const requests = 20;
      await Promise.all(
        Array.from({ length: requests }, () => request(a.server).post(TOKEN).set(bearer(key)).expect(200)),
      );
      const after = await eventuallyValue(
        async () => (await a.deps.db('api_keys').where({ id }).first()).last_used_at,
        5000,
      );
      expect(after).to.be.instanceOf(Date);
      expect(Date.now() - after.getTime()).to.be.lessThan(5000);
      expect(writes, 'batched: far fewer writes than requests').to.be.within(1, requests / 4);
    } finally {
      a.deps.db.removeListener('query', count);
    }
  });
});

/** Polls until `fn` gives a non-null value (or the time is up, then the last value). */
async function eventuallyValue<T>(fn: () => Promise<T>, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > until) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('authentication when the key store is unreachable', () => {
  it('answers 503 auth_unavailable (database really down) and the admin API 500 store_unavailable', async () => {
    const db = await createTestDatabase();
    const t = await createTestApp({}, { db, overrides: { auth: { keyCacheTtlMs: 0 } } });
    const { key } = await issueKey(t);
    await request(t.server).post(TOKEN).set(bearer(key)).expect(200);
    // Point a second instance at a port where nothing listens: a real unreachable database.
    const down = await createTestApp(
      {},
      {
        db: { ...db, url: 'postgres://postgres@127.0.0.1:1/none', drop: async () => {} },
        overrides: { auth: { keyCacheTtlMs: 0 } },
      },
    );
    try {
      const res = await request(down.server).post(TOKEN).set(bearer(key)).expect(503);
      expect(res.body.error.code).to.equal('auth_unavailable');
      expect(res.headers['retry-after']).to.equal('2');
      const adm = await request(down.server)
        .get('/v1/external-transcription/keys')
        .set('Authorization', `Bearer ${down.config.auth.adminToken}`)
        .expect(500);
      expect(adm.body).to.deep.include({ ok: false });
      expect(adm.body.error).to.include({ code: 'store_unavailable', retryable: true });
      expect(adm.headers['retry-after'], 'a dependency failure says when to retry').to.equal('5');
      for (const req of [
        request(down.server).post('/v1/external-transcription/keys').send({}),
        request(down.server).delete('/v1/external-transcription/keys/key_0123456789abcdef01234567'),
      ]) {
        const r = await req.set('Authorization', `Bearer ${down.config.auth.adminToken}`).expect(500);
        expect(r.body.error).to.include({ code: 'store_unavailable', retryable: true });
        expect(r.headers['retry-after']).to.equal('5');
      }
      const ready = await request(down.server).get('/readyz').expect(503);
      expect(ready.body.ok).to.equal(false);
      expect(ready.body.checks.database).to.equal(false);
      expect(ready.body.reason).to.include('database');
    } finally {
      await down.close();
      await t.close();
      await db.drop();
    }
  });
});

describe('session token encoding', () => {
  it('carries exactly JSON.stringify(claims) as its payload, whatever the key id', () => {
    for (const kid of ['key_0123456789abcdef01234567', 'k"e\\y', 'ключ-🔑']) {
      const { token, claims } = issueSessionToken('secret', kid, 60);
      const payload = token.slice(3, token.indexOf('.'));
      expect(Buffer.from(payload, 'base64url').toString('utf8')).to.equal(JSON.stringify(claims));
      expect(verifySessionToken('secret', token)).to.deep.equal(claims);
    }
  });
});

describe('session token signatures are checked exactly', () => {
  it('refuses every non-canonical spelling of a valid signature (padding, junk, standard base64)', () => {
    const { token, claims } = issueSessionToken('secret', 'key_exact', 60);
    expect(verifySessionToken('secret', token)).to.deep.equal(claims);
    const dot = token.indexOf('.');
    const sig = token.slice(dot + 1);
    const head = token.slice(0, dot + 1);
    const variants = [
      token + '=',
      token + '==',
      token + '!!',
      head + sig.slice(0, 10) + '!' + sig.slice(10),
      head + ' ' + sig,
      head + sig.replace(/-/g, '+').replace(/_/g, '/') + (/[-_]/.test(sig) ? '' : '+'),
      head + sig + 'A',
      head + sig.slice(0, -1),
    ];
    for (const v of variants) expect(verifySessionToken('secret', v), v).to.equal(null);
  });
});
