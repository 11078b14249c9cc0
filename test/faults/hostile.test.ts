/**
 * Hostile inputs get a 4xx in the plane's error shape whose message names
 * the real limit; no response or log line carries a stack trace for a
 * client error, a server path or a secret.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import {
  buildRecording,
  createBatchTestApp,
  issueKey,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
} from '../batch/helpers.js';
import type { BatchTestApp, FileServer } from '../batch/helpers.js';
import { ADMIN_TOKEN } from '../helpers/app.js';
import { leaks } from './cluster.js';

describe('faults: hostile input', function () {
  this.timeout(120_000);
  let t: BatchTestApp;
  let key: string;
  let files: FileServer;
  const dir = tmpDir('faults-hostile-');

  before(async () => {
    fs.writeFileSync(
      path.join(dir, 'garbage.wav'),
      Buffer.from('RIFF not really a wave file at all'.repeat(50)),
    );
    buildRecording(path.join(dir, 'short.wav'), ['librivox-austen-0880.wav']);
    files = await startFileServer(dir);
    t = await createBatchTestApp({}, { start: true });
    key = (await issueKey(t, { plan: 'pro' })).key;
  });
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  afterEach(() => {
    expect(leaks(t.logs.text, [key, ADMIN_TOKEN]), 'log leaks').to.deep.equal([]);
  });

  const submit = (body: unknown) =>
    request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .set('content-type', 'application/json')
      .send(typeof body === 'string' ? body : JSON.stringify(body));

  function expectBatch400(res: request.Response, mentions: RegExp) {
    expect(res.status, res.text).to.equal(400);
    expect(res.body).to.have.keys('error', 'code');
    expect(res.body.error).to.match(mentions);
    expect(leaks(res.text)).to.deep.equal([]);
  }

  it('metadata nested 8000 levels deep: 400 naming the depth limit (not a stack overflow)', async () => {
    const deep =
      '{"audio_url":"https://example.com/a.wav","metadata":' + '{"a":'.repeat(8000) + '1' + '}'.repeat(8001);
    expectBatch400(await submit(deep), /nested more than 8 levels/);
    const arrays =
      '{"audio_url":"https://example.com/a.wav","metadata":{"x":' +
      '['.repeat(8000) +
      ']'.repeat(8000) +
      '}}';
    expectBatch400(await submit(arrays), /nested more than 8 levels/);
  });

  it('metadata above 64 KiB and metadata with more than 1000 terms: 400 naming the limit', async () => {
    const big = { audio_url: 'https://example.com/a.wav', metadata: { notes: 'x'.repeat(70 * 1024) } };
    expectBatch400(await submit(big), /limit is 65536 bytes/);
    const terms = Array.from({ length: 1001 }, (_, i) => `term${i}`);
    expectBatch400(
      await submit({ audio_url: 'https://example.com/a.wav', metadata: { known_terms: terms } }),
      /more than 1000 distinct terms/,
    );
    const ok = await submit({
      audio_url: 'https://example.com/a.wav',
      metadata: { known_terms: terms.slice(0, 1000) },
    });
    expect(ok.status, ok.text).to.equal(202);
  });

  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
    it(`GET /docs/assets/${name}: 404 in the API shape, nothing logged as a failure`, async () => {
      const res = await request(t.server).get(`/docs/assets/${name}`);
      expect(res.status).to.equal(404);
      expect(res.body.error.code).to.equal('not_found');
      expect(t.logs.text).to.not.include('request failed');
    });
  }

  function multipart(files: number, fields: number): request.Test {
    let req = request(t.server).post('/v1/audio/transcriptions').set('authorization', `Bearer ${key}`);
    for (let i = 0; i < fields; i++) req = req.field(`f${i}`, 'v');
    for (let i = 0; i < files; i++)
      req = req.attach(i === 0 ? 'file' : `file${i}`, Buffer.alloc(64), `a${i}.wav`);
    return req;
  }

  it('multipart with more than 4 files: 413 too_many_files naming the limit', async () => {
    const res = await multipart(5, 0);
    expect(res.status, res.text).to.equal(413);
    expect(res.body.error).to.include({ code: 'too_many_files' });
    expect(res.body.error.message).to.match(/at most 4 files/);
  });

  it('multipart with more than 100 fields: 413 too_many_fields naming the limit', async () => {
    const res = await multipart(1, 101);
    expect(res.status, res.text).to.equal(413);
    expect(res.body.error).to.include({ code: 'too_many_fields' });
    expect(res.body.error.message).to.match(/at most 100 fields/);
  });

  it('a batch job whose audio cannot be decoded reports the failure without a server path', async () => {
    const res = await submit({ audio_url: `${files.url}/garbage.wav`, request_id: randomId() });
    expect(res.status).to.equal(202);
    const id = res.body.workflow_id as string;
    const done = await waitFor(async () => {
      const p = await request(t.server)
        .get(`/v1/audio/transcriptions/jobs/${id}`)
        .set('authorization', `Bearer ${key}`);
      return p.body.status === 'errored' ? p : undefined;
    }, 60_000);
    expect(done.body.error.name).to.equal('AudioDecodeError');
    expect(leaks(done.text)).to.deep.equal([]);
    expect(done.text).to.not.match(/\/tmp\/|batch-data-|\.data\//);
  });
});
