/** Submission validation, deprecated forms, idempotency and OpenAPI (no workers needed). */
import fs from 'node:fs';
import { expect } from 'chai';
import request from 'supertest';
import { tenantStore } from '../../api/batch/storage/index.js';
import { compile } from '../../api/http/validate.js';
import { jobRequestSchema } from '../../api/batch/schemas.js';
import {
  createBatchTestApp,
  issueKey,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
} from './helpers.js';

describe('batch: submission', function () {
  this.timeout(30_000);
  let t: BatchTestApp;
  let key: string;
  before(async () => {
    t = await createBatchTestApp({}, { start: false });
    key = (await issueKey(t, { ownerId: 'tenant-a', plan: 'pro' })).key;
  });
  after(async () => t?.close());

  const submit = (body: unknown, path = '/v1/audio/transcriptions/jobs') =>
    request(t.server)
      .post(path)
      .set('authorization', `Bearer ${key}`)
      .send(body as object);

  it('accepts a valid job with 202 and the 2.2 body; the workflow starts queued', async () => {
    const r = await submit({ audio_url: 'https://example.com/a.mp3' });
    expect(r.status).to.equal(202);
    expect(r.body).to.have.all.keys('request_id', 'workflow_id', 'status', 'endpoint', 'poll_endpoint');
    expect(r.body.request_id).to.match(/^[0-9a-f-]{36}$/);
    expect(r.body.workflow_id).to.match(/^cf_[0-9a-f]{64}$/);
    expect(r.body.status).to.equal('queued');
    expect(r.headers).to.not.have.property('deprecation');
    const p = await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/${r.body.workflow_id}`)
      .set('authorization', `Bearer ${key}`);
    expect(p.status).to.equal(200);
    expect(p.body).to.deep.include({
      workflow_id: r.body.workflow_id,
      status: 'queued',
      steps: [],
      error: null,
    });
  });

  const bad: [string, unknown][] = [
    ['missing audio_url', {}],
    ['non-http audio_url', { audio_url: 'ftp://example.com/a.wav' }],
    ['file: audio_url', { audio_url: 'file:///etc/passwd' }],
    ['relative audio_url', { audio_url: '/a.wav' }],
    ['audio_url not a string', { audio_url: 42 }],
    ['segment_seconds 0', { audio_url: 'https://e.com/a', segment_seconds: 0 }],
    ['segment_seconds negative', { audio_url: 'https://e.com/a', segment_seconds: -5 }],
    ['concurrency 0', { audio_url: 'https://e.com/a', concurrency: 0 }],
    ['concurrency string', { audio_url: 'https://e.com/a', concurrency: '2' }],
    [
      'response_format unknown (stored fields are capped)',
      { audio_url: 'https://e.com/a', response_format: 'x'.repeat(1000) },
    ],
    ['segment_seconds above its maximum', { audio_url: 'https://e.com/a', segment_seconds: 1e308 }],
    ['review not boolean', { audio_url: 'https://e.com/a', review: 'yes' }],
    ['metadata not object', { audio_url: 'https://e.com/a', metadata: 'x' }],
    ['unknown field', { audio_url: 'https://e.com/a', colour: 'red' }],
    ['webhook_url not http', { audio_url: 'https://e.com/a', webhook_url: 'javascript:alert(1)' }],
    ['request_id with traversal', { audio_url: 'https://e.com/a', request_id: '../x' }],
    ['request_id dot-dot', { audio_url: 'https://e.com/a', request_id: '..' }],
    ['prompt with a NUL', { audio_url: 'https://e.com/a', prompt: 'a\u0000b' }],
    ['model with a NUL', { audio_url: 'https://e.com/a', model: 'a\u0000b' }],
    ['model with a direction override', { audio_url: 'https://e.com/a', model: 'evil\u202etxt' }],
    ['metadata value with a NUL', { audio_url: 'https://e.com/a', metadata: { k: 'a\u0000b' } }],
    ['metadata key with a NUL', { audio_url: 'https://e.com/a', metadata: { 'a\u0000b': 1 } }],
  ];
  for (const [name, body] of bad) {
    it(`400 {error} for ${name}`, async () => {
      const r = await submit(body);
      expect(r.status).to.equal(400);
      expect(r.body.error).to.be.a('string').and.not.empty;
    });
  }

  it('400 for a language the engine cannot serve; accepted hints pass', async () => {
    const r = await submit({ audio_url: 'https://e.com/a', language: 'zh' });
    expect(r.status).to.equal(400);
    expect(r.body.code).to.equal('unsupported_language');
    expect((await submit({ audio_url: 'https://e.com/a', language: 'en' })).status).to.equal(202);
    expect((await submit({ audio_url: 'https://e.com/a', language: 'auto' })).status).to.equal(202);
  });

  it('400 for a non-JSON body and for a JSON array', async () => {
    const a = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .set('content-type', 'application/json')
      .send('{not json');
    expect(a.status).to.equal(400);
    expect(a.body.error).to.be.a('string');
    const b = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .set('content-type', 'text/plain')
      .send('audio_url=https://e.com/a');
    expect(b.status).to.equal(400);
    const c = await submit([{ audio_url: 'https://e.com/a' }]);
    expect(c.status).to.equal(400);
  });

  it('401 without a key, in the batch error shape', async () => {
    const r = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .send({ audio_url: 'https://e.com/a' });
    expect(r.status).to.equal(401);
    expect(r.body.error).to.be.a('string');
  });

  it('deprecated POST / and JSON POST /v1/audio/transcriptions: same 202 plus Deprecation and Link', async () => {
    for (const path of ['/', '/v1/audio/transcriptions']) {
      const r = await submit({ audio_url: 'https://example.com/a.mp3' }, path);
      expect(r.status, path).to.equal(202);
      expect(r.body.workflow_id).to.match(/^cf_[0-9a-f]{64}$/);
      expect(r.headers.deprecation).to.equal('true');
      expect(r.headers.link).to.equal('</v1/audio/transcriptions/jobs>; rel="successor-version"');
      const bad = await submit({ audio_url: 'nope' }, path);
      expect(bad.status, path).to.equal(400);
      expect(bad.body.error).to.be.a('string');
    }
  });

  it('a resubmission while the first run is unfinished returns the same workflow', async () => {
    const requestId = randomId();
    const a = await submit({ audio_url: 'https://example.com/a.mp3', request_id: requestId });
    const b = await submit({ audio_url: 'https://example.com/a.mp3', request_id: requestId });
    expect(a.body.workflow_id).to.equal(b.body.workflow_id);
    expect(b.body.request_id).to.equal(requestId);
    // Another tenant with the same request_id gets its own workflow.
    const other = (await issueKey(t, { ownerId: 'tenant-z', plan: 'pro' })).key;
    const c = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${other}`)
      .send({ audio_url: 'https://example.com/a.mp3', request_id: requestId });
    expect(c.body.workflow_id).to.not.equal(a.body.workflow_id);
  });

  it('the request schema is the one in /openapi.json', async () => {
    const r = await request(t.server).get('/openapi.json');
    expect(r.status).to.equal(200);
    expect(r.body.components.schemas.TranscriptionJobRequest).to.deep.equal(
      JSON.parse(JSON.stringify(jobRequestSchema)),
    );
    expect(r.body.paths['/v1/audio/transcriptions/jobs'].post).to.exist;
    expect(r.body.paths['/v1/audio/transcriptions/jobs/{workflowId}'].get).to.exist;
    expect(r.body.paths['/r2/{key}'].get).to.exist;
    expect(r.body.paths['/'].post.deprecated).to.equal(true);
    expect(compile(jobRequestSchema)({ audio_url: 'https://e.com/a' })).to.equal(true);
  });

  it('GET /r2 refuses traversal, absolute and encoded keys; 404 for missing', async () => {
    const auth = { authorization: `Bearer ${key}` };
    for (const p of [
      '/r2/../etc/passwd',
      '/r2/transcription/%2e%2e/x.json',
      '/r2/%2Fetc%2Fpasswd',
      '/r2/transcription/a/..%2F..%2Fx',
      '/r2/transcription//x.json',
      '/r2/a\\b.json',
      '/r2/transcription%2F%252e%252e%2Fx.json',
      '/r2/transcription/%E0%A4%A.json',
    ]) {
      const r = await request(t.server).get(p).set(auth);
      expect([400, 404], p).to.include(r.status);
      expect(r.body.error, p).to.be.a('string');
    }
    const missing = await request(t.server).get('/r2/transcription/nope/result.json').set(auth);
    expect(missing.status).to.equal(404);
    expect(missing.body.error).to.be.a('string');
    const anon = await request(t.server).get('/r2/transcription/nope/result.json');
    expect(anon.status).to.equal(401);
    // Keys the filesystem cannot hold (a name too long, a path through a file) are missing, not a 500.
    await tenantStore(t.runtime.store, 'tenant-a').putJson('transcription/r1/result.json', { text: 'x' });
    for (const p of [
      `/r2/transcription/${'a'.repeat(300)}/result.json`,
      '/r2/transcription/r1/result.json/x',
    ]) {
      const r = await request(t.server).get(p).set(auth);
      expect(r.status, p).to.equal(404);
      expect(r.body.error, p).to.be.a('string');
    }
    // As generated clients send a path parameter: percent-encoded.
    for (const p of ['/r2/transcription/r1/result.json', '/r2/transcription%2Fr1%2Fresult.json'])
      expect((await request(t.server).get(p).set(auth)).body, p).to.deep.equal({ text: 'x' });
  });

  it('unrelated single-segment paths still get the generic 404', async () => {
    const r = await request(t.server).get('/not-a-workflow').set('authorization', `Bearer ${key}`);
    expect(r.status).to.equal(404);
  });

  it('refuses private and metadata IP-literal destinations at submission (allow-list aside)', async () => {
    for (const body of [
      { audio_url: 'http://169.254.169.254/latest/meta-data/' },
      { audio_url: 'http://10.0.0.5/a.wav' },
      { audio_url: 'http://[::1]/a.wav' },
      { audio_url: 'https://example.com/a.wav', webhook_url: 'http://192.168.1.10/hook' },
      { audio_url: 'http://user:pw@example.com/a.wav' },
    ]) {
      const r = await submit(body);
      expect(r.status, JSON.stringify(body)).to.equal(400);
      expect(r.body.error).to.be.a('string');
    }
    // 127.0.0.1 is on this test app's allow-list.
    expect((await submit({ audio_url: 'http://127.0.0.1:9/a.wav' })).status).to.equal(202);
  });
});

describe('batch: default outbound policy (no allow-list)', function () {
  this.timeout(30_000);
  let t: BatchTestApp;
  let key: string;
  before(async () => {
    t = await createBatchTestApp({ OUTBOUND_ALLOW: '' }, { start: true });
    key = (await issueKey(t, { ownerId: 'tenant-a', plan: 'pro' })).key;
  });
  after(async () => t?.close());

  it('refuses loopback audio and webhook URLs', async () => {
    expect(t.config.batch.outbound.allow).to.deep.equal([]);
    for (const body of [
      { audio_url: 'http://127.0.0.1:8080/a.wav' },
      { audio_url: 'https://example.com/a', webhook_url: 'http://127.0.0.1/h' },
    ]) {
      const r = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send(body);
      expect(r.status).to.equal(400);
      expect(r.body.error).to.include('OUTBOUND_ALLOW'); // names the setting that allows it
    }
    expect(t.runtime.destinationRefusal('http://localhost/a.wav')).to.equal(null); // names are checked at fetch time
    expect(t.runtime.outbound.policy.addressAllowed('127.0.0.1', 'localhost')).to.equal(false);
  });

  it('says why a URL is refused: credentials, scheme, address', async () => {
    const cases: [Record<string, string>, RegExp][] = [
      [{ audio_url: 'https://user:pw@example.com/a.wav' }, /"audio_url".*credentials/],
      [
        { audio_url: 'https://example.com/a.wav', webhook_url: 'https://u:p@example.com/h' },
        /"webhook_url".*credentials/,
      ],
      [{ audio_url: 'ftp://example.com/a.wav' }, /must be an http/],
      [{ audio_url: 'http://10.0.0.1/a.wav' }, /OUTBOUND_ALLOW/],
    ];
    for (const [body, message] of cases) {
      const r = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send(body);
      expect(r.status, JSON.stringify(body)).to.equal(400);
      expect(r.body.code).to.equal('invalid_request');
      expect(r.body.error, JSON.stringify(body)).to.match(message);
    }
  });

  it('a host name resolving to loopback is refused when fetched: the job errors', async () => {
    const dir = tmpDir('batch-default-');
    const files = await startFileServer(dir);
    try {
      const r = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `http://localhost:${files.port}/a.wav` });
      expect(r.status).to.equal(202);
      const done = await waitFor(async () => {
        const p = await request(t.server).get(`/${r.body.workflow_id}`).set('authorization', `Bearer ${key}`);
        return p.body.status === 'errored' ? p : undefined;
      }, 20_000);
      expect(done.body.error.name).to.equal('AudioFetchError');
      expect(done.body.error.message).to.match(/non-public/);
      expect(files.hits).to.have.length(0);
    } finally {
      await files.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('batch: a tenant has at most BATCH_MAX_UNFINISHED_PER_TENANT jobs queued or running', function () {
  this.timeout(30_000);
  let t: BatchTestApp;
  before(async () => {
    t = await createBatchTestApp({ BATCH_WORKERS: 'false', BATCH_MAX_UNFINISHED_PER_TENANT: '2' });
  });
  after(async () => t?.close());

  it('refuses a third with 429 too_many_jobs; a resubmission and another tenant are served', async () => {
    const a = (await issueKey(t, { ownerId: 'tenant-capped', plan: 'pro' })).key;
    const b = (await issueKey(t, { ownerId: 'tenant-other', plan: 'pro' })).key;
    const submit = (key: string, requestId: string) =>
      request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: 'https://example.com/a.wav', request_id: requestId });
    const first = await submit(a, 'one');
    expect((await submit(a, 'two')).status).to.equal(202);
    const third = await submit(a, 'three');
    expect(third.status).to.equal(429);
    expect(third.body.code).to.equal('too_many_jobs');
    expect(third.headers['retry-after']).to.match(/^\d+$/);
    const again = await submit(a, 'one');
    expect(again.status).to.equal(202);
    expect(again.body.workflow_id).to.equal(first.body.workflow_id);
    expect((await submit(b, 'three')).status).to.equal(202);
  });
});
