/**
 * Owners never merge (issue 41): each spelling of an owner id is one tenant,
 * spellings that UTF-8 cannot keep apart are refused, keys issued without an
 * owner are tenants of their own, and a retried key issue gives one key.
 */
import { expect } from 'chai';
import request from 'supertest';
import { ADMIN_TOKEN, createTestApp } from '../helpers/app.js';
import { startApi } from '../../api/server.js';
import { assertKeyPlansKnown } from '../../shared/platform.js';
import { createLogger } from '../../shared/logger.js';
import { createBatchTestApp, randomId, type BatchTestApp } from '../batch/helpers.js';

const KEYS = '/v1/external-transcription/keys';
const admin = { Authorization: `Bearer ${ADMIN_TOKEN}` };
const JOBS = '/v1/audio/transcriptions/jobs';

describe('tenancy: owners never merge', function () {
  this.timeout(30_000);
  let t: BatchTestApp;
  before(async () => {
    t = await createBatchTestApp({ BATCH_WORKERS: 'false' });
  });
  after(async () => t?.close());

  const issue = async (body: object, headers: Record<string, string> = {}) =>
    request(t.server).post(KEYS).set(admin).set(headers).send(body);

  it('refuses lone surrogates; U+FFFD itself is an owner of its own', async () => {
    for (const owner of ['lone\ud800', 'lone\udfff']) {
      const r = await issue({ owner_id: owner });
      expect(r.status, JSON.stringify(owner)).to.equal(400);
    }
    const r = await issue({ owner_id: 'lone\ufffd' });
    expect(r.status).to.equal(201);
    expect(r.body.data.ownerId).to.equal('lone\ufffd');
  });

  it('stores owners in NFC: two spellings of one name are one owner, listed under either', async () => {
    const composed = (await issue({ owner_id: 'caf\u00e9-nfc' })).body.data;
    const decomposed = (await issue({ owner_id: 'cafe\u0301-nfc' })).body.data;
    expect(decomposed.ownerId).to.equal(composed.ownerId).and.equal('caf\u00e9-nfc');
    const listed = await request(t.server)
      .get(KEYS)
      .query({ owner_id: 'cafe\u0301-nfc' })
      .set(admin)
      .expect(200);
    expect(listed.body.data.map((k: { id: string }) => k.id).sort()).to.deep.equal(
      [composed.id, decomposed.id].sort(),
    );
  });

  it('two keys issued with the default owner do not share request_ids, workflows or artifacts', async () => {
    const a = (await issue({ plan: 'pro' })).body.data;
    const b = (await issue({ plan: 'pro' })).body.data;
    const requestId = randomId('shared');
    const submit = (key: string) =>
      request(t.server)
        .post(JOBS)
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: 'https://example.com/a.wav', request_id: requestId });
    const first = await submit(a.key);
    const second = await submit(b.key);
    expect(first.status).to.equal(202);
    expect(second.status).to.equal(202);
    expect(second.body.workflow_id).to.not.equal(first.body.workflow_id);
    expect(a.ownerId).to.equal('default');
    expect(b.ownerId).to.equal('default');
    const peek = await request(t.server)
      .get(`${JOBS}/${first.body.workflow_id}`)
      .set('authorization', `Bearer ${b.key}`);
    expect(peek.status).to.equal(404);
    const own = await request(t.server)
      .get(`${JOBS}/${first.body.workflow_id}`)
      .set('authorization', `Bearer ${a.key}`);
    expect(own.status).to.equal(200);
  });

  describe('key issue is idempotent on Idempotency-Key', () => {
    it('a retry answers the same key with a new secret; the lost one stops working', async () => {
      const idem = { 'Idempotency-Key': randomId('idem') };
      const body = { owner_id: 'idem-owner', plan: 'pro', label: 'ci' };
      const first = await issue(body, idem);
      const retry = await issue(body, idem);
      expect(first.status).to.equal(201);
      expect(retry.status).to.equal(201);
      expect(retry.headers['idempotent-replayed']).to.equal('true');
      expect(retry.body.data.id).to.equal(first.body.data.id);
      expect(retry.body.data.key).to.be.a('string').and.not.equal(first.body.data.key);
      const listed = await request(t.server)
        .get(KEYS)
        .query({ owner_id: 'idem-owner' })
        .set(admin)
        .expect(200);
      expect(listed.body.data).to.have.length(1);
      const use = (key: string) =>
        request(t.server)
          .post(JOBS)
          .set('authorization', `Bearer ${key}`)
          .send({ audio_url: 'https://example.com/a.wav' });
      expect((await use(first.body.data.key)).status).to.equal(401);
      expect((await use(retry.body.data.key)).status).to.equal(202);
    });

    it('409 idempotency_key_reused for another request, and after revocation; 400 for a bad header', async () => {
      const idem = { 'Idempotency-Key': randomId('idem') };
      const first = await issue({ owner_id: 'idem-2' }, idem);
      expect(first.status).to.equal(201);
      const other = await issue({ owner_id: 'idem-3' }, idem);
      expect(other.status).to.equal(409);
      expect(other.body.error.code).to.equal('idempotency_key_reused');
      await request(t.server).delete(`${KEYS}/${first.body.data.id}`).set(admin).expect(200);
      expect((await issue({ owner_id: 'idem-2' }, idem)).status).to.equal(409);
      expect((await issue({}, { 'Idempotency-Key': 'x'.repeat(256) })).status).to.equal(400);
    });
  });
});

describe('tenancy: a plan removed from PLANS_JSON', function () {
  this.timeout(30_000);
  it('stops the API from starting while active keys hold it, and names it', async () => {
    const withTeam = await createTestApp({ PLANS_JSON: '{"team":{"maxConcurrentConnections":3}}' });
    try {
      const issued = await request(withTeam.server).post(KEYS).set(admin).send({ plan: 'team' });
      expect(issued.status).to.equal(201);
      const without = await createTestApp({}, { db: withTeam.db });
      try {
        let err: unknown;
        await startApi(without.config, createLogger({ level: 'silent' }), { deps: without.deps }).catch(
          (e: unknown) => (err = e),
        );
        // Before: served and billed as free while its usage report said 0 s left.
        expect(String(err)).to.match(/PLANS_JSON no longer defines: "team" \(1 keys\)/);
        // Revoked, it no longer holds the start back.
        await request(withTeam.server).delete(`${KEYS}/${issued.body.data.id}`).set(admin).expect(200);
        await assertKeyPlansKnown(without.deps);
      } finally {
        await without.close();
      }
    } finally {
      await withTeam.close();
    }
  });
});
