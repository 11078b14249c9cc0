/**
 * Usage reports against real metering from all three planes: the whole
 * service (npm start's code path) on a test database, a real segment request,
 * a real realtime session and a real batch job, then the operator's reports
 * per owner and per key and the key holder's own report.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueServiceKey, REPO_ROOT, startService, type RunningService } from '../helpers/service.js';
import { startFileServer, type FileServer } from '../batch/helpers.js';
import { bearer, connect, eventually, readPcm, silence } from '../realtime/helpers.js';

const SAMPLE = path.join(REPO_ROOT, 'samples/jfk.wav');
const today = () => new Date().toISOString().slice(0, 10);

type Json = Record<string, any>;

describe('usage reports (real metering from the segment, realtime and batch planes)', function () {
  this.timeout(240_000);
  let db: TestDatabase;
  let svc: RunningService;
  let files: FileServer;
  let a1: { key: string; id: string };
  let a2: { key: string; id: string };
  let b1: { key: string; id: string };

  const admin = (p: string) =>
    fetch(`${svc.baseUrl}/v1/external-transcription${p}`, {
      headers: { Authorization: `Bearer ${svc.adminToken}` },
    });

  before(async () => {
    db = await createTestDatabase('stt_usage');
    files = await startFileServer(path.join(REPO_ROOT, 'samples'));
    // Generous decode limits: metering is tested here, not decode speed (CI machines are shared).
    svc = await startService({
      DATABASE_URL: db.url,
      OUTBOUND_ALLOW: '127.0.0.1',
      STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
    });
    a1 = await issueServiceKey(svc, { owner_id: 'usage-a', label: 'one' });
    a2 = await issueServiceKey(svc, { owner_id: 'usage-a', label: 'two' });
    b1 = await issueServiceKey(svc, { owner_id: 'usage-b' });

    // Segment: one request with key a1.
    const form = new FormData();
    form.append('file', new Blob([fs.readFileSync(SAMPLE)]), 'jfk.wav');
    form.append('response_format', 'json');
    const seg = await fetch(`${svc.baseUrl}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${a1.key}` },
      body: form,
    });
    expect(seg.status, await seg.clone().text()).to.equal(200);

    // Realtime: one session with key a1, through the API's base URL.
    const ws = await connect(
      `${svc.baseUrl.replace('http', 'ws')}/v1/audio/transcriptions/stream`,
      bearer(a1.key),
    );
    await ws.next('session.created');
    await ws.stream(Buffer.concat([readPcm('jfk.wav'), silence(1500)]), { pace: 4 });
    await ws.next('conversation.item.input_audio_transcription.completed', 60_000);
    ws.ws.close(1000);
    await ws.closed;

    // Batch: one job with key a2, fetched from a loopback file server (OUTBOUND_ALLOW).
    const sub = await fetch(`${svc.baseUrl}/v1/audio/transcriptions/jobs`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${a2.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ audio_url: `${files.url}/jfk.wav` }),
    });
    // Read once: a clone read before its original can leave the original's body empty under load.
    const subText = await sub.text();
    expect(sub.status, subText).to.equal(202);
    const { workflow_id } = JSON.parse(subText) as { workflow_id: string };
    const done = await eventually(
      async () =>
        (await (
          await fetch(`${svc.baseUrl}/v1/audio/transcriptions/jobs/${workflow_id}`, {
            headers: { Authorization: `Bearer ${a2.key}` },
          })
        ).json()) as Json,
      (b) => ['complete', 'errored', 'terminated'].includes(b.status),
      120_000,
    );
    expect(done.status).to.equal('complete');
  });

  after(async () => {
    await svc?.stop();
    await files?.close();
    await db?.drop();
  });

  it('answers per owner: each plane, each key, each day, and every key’s billing window', async () => {
    // Realtime usage is written when the session closes: wait for it.
    const body = await eventually(
      async () => (await (await admin('/owners/usage-a/usage')).json()) as Json,
      (b) => b.data?.totals?.sessions === 1,
      30_000,
    );
    expect(body.ok).to.equal(true);
    const d = body.data;
    expect(d).to.include({ ownerId: 'usage-a', granularity: 'day', to: today() });
    expect(d.totals).to.include({ requests: 1, sessions: 1, jobs: 1 });
    expect(d.totals.audioSeconds.segment).to.be.closeTo(11, 0.2);
    expect(d.totals.audioSeconds.realtime).to.be.within(10, 13.5);
    expect(d.totals.audioSeconds.batch).to.be.closeTo(11, 0.2);
    const sum = d.totals.audioSeconds.segment + d.totals.audioSeconds.realtime + d.totals.audioSeconds.batch;
    expect(d.totals.audioSeconds.total).to.be.closeTo(sum, 0.01);
    expect(d.days).to.have.length(30); // default: the last 30 days, empty ones included
    expect(d.days.at(-1)).to.deep.include({ date: today(), requests: 1, sessions: 1, jobs: 1 });
    expect(d.days[0].audioSeconds.total).to.equal(0);

    const byKey = Object.fromEntries(d.keys.map((k: Json) => [k.keyId, k]));
    expect(Object.keys(byKey)).to.have.members([a1.id, a2.id]);
    expect(byKey[a1.id]).to.include({ requests: 1, sessions: 1, jobs: 0, label: 'one', plan: 'pro' });
    expect(byKey[a2.id]).to.include({ requests: 0, sessions: 0, jobs: 1 });
    const w = byKey[a1.id].window;
    expect(w.seconds).to.equal(86_400);
    expect(w.usedAudioSeconds).to.be.closeTo(
      byKey[a1.id].audioSeconds.segment + byKey[a1.id].audioSeconds.realtime,
      0.01,
    );
    const plans = (await (await fetch(`${svc.baseUrl}/v1/external-transcription/plans`)).json()) as Json;
    const pro = plans.data.find((p: Json) => p.plan === 'pro').limits;
    expect(w.maxAudioSecondsPerWindow).to.equal(pro.maxAudioSecondsPerWindow);
    expect(w.remainingAudioSeconds).to.be.closeTo(pro.maxAudioSecondsPerWindow - w.usedAudioSeconds, 0.01);
  });

  it('answers per key, over a chosen range, and keeps owners apart', async () => {
    const body = (await (await admin(`/keys/${a2.id}/usage?from=2026-01-01&to=${today()}`)).json()) as Json;
    expect(body.data).to.include({ keyId: a2.id, ownerId: 'usage-a', from: '2026-01-01' });
    expect(body.data.totals).to.include({ requests: 0, sessions: 0, jobs: 1 });
    expect(body.data.keys).to.have.length(1);

    const past = (await (await admin(`/keys/${a1.id}/usage?from=2026-01-01&to=2026-01-31`)).json()) as Json;
    expect(past.data.days).to.have.length(31);
    expect(past.data.totals.audioSeconds.total).to.equal(0);
    expect(past.data.keys[0].window.usedAudioSeconds).to.be.above(0); // the window is now, whatever the range

    const other = (await (await admin('/owners/usage-b/usage')).json()) as Json;
    expect(other.data.keys.map((k: Json) => k.keyId)).to.deep.equal([b1.id]);
    expect(other.data.totals).to.include({ requests: 0, sessions: 0, jobs: 0 });
  });

  it('lets a key holder read its own usage, and no one else’s', async () => {
    const res = await fetch(`${svc.baseUrl}/v1/usage`, { headers: { Authorization: `Bearer ${a1.key}` } });
    expect(res.status).to.equal(200);
    const own = (await res.json()) as Json;
    expect(own).to.include({ keyId: a1.id, ownerId: 'usage-a' });
    expect(own.keys.map((k: Json) => k.keyId)).to.deep.equal([a1.id]);
    expect(own.totals).to.include({ requests: 1, sessions: 1, jobs: 0 });
    const anon = await fetch(`${svc.baseUrl}/v1/usage`);
    expect(anon.status).to.equal(401);
    expect(((await anon.json()) as Json).error.code).to.equal('missing_api_key');
  });

  it('refuses bad input in the admin envelope', async () => {
    const noToken = await fetch(`${svc.baseUrl}/v1/external-transcription/owners/usage-a/usage`);
    expect(noToken.status).to.equal(401);
    expect(((await noToken.json()) as Json).error.code).to.equal('admin_unauthorized');
    for (const [q, code] of [
      ['?from=2026-02-01&to=2026-01-01', 'invalid_range'],
      ['?from=2020-01-01&to=2026-01-01', 'invalid_range'],
      ['?from=yesterday', 'invalid_request'],
      ['?bucket=hour', 'invalid_request'],
    ]) {
      const res = await admin(`/owners/usage-a/usage${q}`);
      expect(res.status, q).to.equal(400);
      const body = (await res.json()) as Json;
      expect(body, q).to.deep.include({ ok: false });
      expect(body.error.code, q).to.equal(code);
    }
    const unknown = await admin('/keys/key_000000000000000000000000/usage');
    expect(unknown.status).to.equal(404);
    expect(((await unknown.json()) as Json).error.code).to.equal('key_not_found');
  });

  it('is described in /openapi.json', async () => {
    const doc = (await (await fetch(`${svc.baseUrl}/openapi.json`)).json()) as Json;
    expect(doc.paths).to.have.property('/v1/external-transcription/owners/{ownerId}/usage');
    expect(doc.paths).to.have.property('/v1/external-transcription/keys/{id}/usage');
    expect(doc.paths['/v1/usage'].get.operationId).to.equal('ownUsage');
  });
});
