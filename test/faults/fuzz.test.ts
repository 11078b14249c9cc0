/**
 * Property-based fuzzing (fast-check) of every plane's input: JSON bodies,
 * multipart bodies, headers and WebSocket frames. Properties: no 5xx, every
 * error in its plane's shape without a stack or server path, the process
 * keeps serving (a well-formed request still succeeds afterwards), memory
 * stays flat. Thousands of cases, each run bounded in time.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import request from 'supertest';
import WebSocket from 'ws';
import { createTestApp, issueKey, ADMIN_TOKEN, type TestApp } from '../helpers/app.js';
import { realtimeWithBuiltinEngine } from '../realtime/helpers.js';
import { leaks } from './cluster.js';

const JOBS = '/v1/audio/transcriptions/jobs';
const SEGMENT = '/v1/audio/transcriptions';
const KEYS = '/v1/external-transcription/keys';

/** JSON-ish values with the shapes that break parsers: deep nesting, prototype names, odd numbers. */
const hostileJson = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constantFrom(null, true, false, 0, -1, 1e308, -0, Number.MAX_SAFE_INTEGER + 2),
    fc.double(),
    fc.string(),
    fc.constantFrom(
      '__proto__',
      'constructor',
      'toString',
      '\u0000',
      '../../etc/passwd',
      'https://127.0.0.1/',
    ),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.dictionary(
      fc.oneof(fc.string(), fc.constantFrom('__proto__', 'constructor', 'audio_url', 'metadata', 'review')),
      tie('value'),
      { maxKeys: 5 },
    ),
  ),
})).value;

const jobBody = fc.record(
  {
    audio_url: fc.oneof(fc.webUrl(), fc.string(), fc.constant('http://127.0.0.1/x'), hostileJson),
    request_id: fc.oneof(fc.string(), hostileJson),
    language: fc.oneof(fc.string(), hostileJson),
    prompt: fc.oneof(fc.string({ maxLength: 3000 }), hostileJson),
    segment_seconds: fc.oneof(fc.double(), hostileJson),
    concurrency: fc.oneof(fc.integer(), hostileJson),
    review: fc.oneof(fc.boolean(), hostileJson),
    metadata: hostileJson,
    webhook_url: fc.oneof(fc.webUrl(), hostileJson),
  },
  { requiredKeys: [] },
);

function expectShape(res: request.Response, plane: 'api' | 'batch' | 'admin'): void {
  expect(res.status, `${res.status} ${res.text}`).to.be.below(500);
  expect(leaks(res.text)).to.deep.equal([]);
  if (res.status < 400 || !res.text) return;
  const body = JSON.parse(res.text) as Record<string, any>;
  if (plane === 'batch') expect(body.error, res.text).to.be.a('string');
  else if (plane === 'admin') expect(body.ok, res.text).to.equal(false);
  else expect(body.error?.code, res.text).to.be.a('string');
}

describe('faults: fuzzing every plane (fast-check)', function () {
  this.timeout(300_000);
  let t: TestApp;
  let key: string;
  let heapBefore: number;

  before(async () => {
    t = await createTestApp({ PLANS_JSON: JSON.stringify({ fuzz: { maxRequestsPerMinute: 1_000_000 } }) });
    key = (await issueKey(t, { plan: 'fuzz' })).key;
    heapBefore = process.memoryUsage().heapUsed;
  });
  after(async () => {
    await t?.close();
  });

  it('job submissions: any JSON body gets 202 or a 4xx in the batch shape', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(jobBody, hostileJson), async (body) => {
        const res = await request(t.server)
          .post(JOBS)
          .set('authorization', `Bearer ${key}`)
          .set('content-type', 'application/json')
          .send(JSON.stringify(body) ?? 'null');
        expectShape(res, 'batch');
      }),
      { numRuns: 1500, interruptAfterTimeLimit: 60_000 },
    );
  });

  it('raw bodies and headers: any bytes, content type and authorization on every route', async () => {
    const routes: [string, string, 'api' | 'batch' | 'admin'][] = [
      ['post', JOBS, 'batch'],
      ['post', '/', 'batch'],
      ['post', SEGMENT, 'api'],
      ['post', `${SEGMENT}/session-token`, 'api'],
      ['post', KEYS, 'admin'],
      ['get', `${JOBS}/cf_${'a'.repeat(64)}`, 'batch'],
      ['get', '/r2/transcription/x/raw_result.json', 'batch'],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        fc.oneof(
          fc.string(),
          fc.uint8Array({ maxLength: 2048 }).map((b) => Buffer.from(b)),
        ),
        fc.constantFrom(
          'application/json',
          'multipart/form-data',
          'multipart/form-data; boundary=x',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/json; charset=utf-16',
          '',
        ),
        fc.oneof(
          fc.constant(`Bearer ${key}`),
          fc.constant(`Bearer ${ADMIN_TOKEN}`),
          fc.string(),
          fc.constant('Bearer sk-' + 'A'.repeat(40)),
        ),
        async ([method, path, plane], body, type, authorization) => {
          let req = (method === 'get' ? request(t.server).get(path) : request(t.server).post(path)).set(
            'authorization',
            authorization.replace(/[\r\n]/g, ''),
          );
          if (type) req = req.set('content-type', type);
          const res = method === 'get' ? await req : await req.send(body);
          // A JSON body on the segment path is the deprecated job submission (batch plane).
          const json = /^application\/json/.test(type) && path === SEGMENT;
          expectShape(res, json || path === '/' ? 'batch' : plane);
        },
      ),
      { numRuns: 1500, interruptAfterTimeLimit: 60_000 },
    );
  });

  it('multipart segment uploads: any fields and files get a 4xx (or 200) in the API shape', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string({ minLength: 1, maxLength: 20 }), fc.string({ maxLength: 200 }), {
          maxKeys: 12,
        }),
        fc.array(
          fc.record({
            name: fc.oneof(fc.constant('file'), fc.string({ minLength: 1, maxLength: 10 })),
            data: fc.uint8Array({ maxLength: 512 }),
            filename: fc.string({ minLength: 1, maxLength: 30 }),
          }),
          { maxLength: 6 },
        ),
        async (fields, files) => {
          let req = request(t.server).post(SEGMENT).set('authorization', `Bearer ${key}`);
          for (const [k, v] of Object.entries(fields)) req = req.field(k.replace(/[\r\n"]/g, '_'), v);
          for (const f of files)
            req = req.attach(
              f.name.replace(/[\r\n"]/g, '_'),
              Buffer.from(f.data),
              f.filename.replace(/[\r\n"/\\]/g, '_'),
            );
          const res = await req;
          expectShape(res, 'api');
        },
      ),
      { numRuns: 200, interruptAfterTimeLimit: 30_000 },
    );
  });

  it('still serves well-formed requests, memory flat', async () => {
    const ok = await request(t.server)
      .post(JOBS)
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: 'https://example.com/a.wav' });
    expect(ok.status).to.equal(202);
    const grown = (process.memoryUsage().heapUsed - heapBefore) / 1024 / 1024;
    expect(grown, `heap grew ${grown.toFixed(0)} MiB`).to.be.below(150);
    expect(leaks(t.logs.text, [key, ADMIN_TOKEN])).to.deep.equal([]);
  });
});

describe('faults: fuzzing realtime frames (fast-check)', function () {
  this.timeout(300_000);
  const ctx = realtimeWithBuiltinEngine();

  it('any text or binary frames: the connection ends with a documented close code, the server keeps serving', async () => {
    const { key } = await ctx().issueKey('pro');
    const allowed = new Set([1000, 1005, 1006, 1007, 1008, 1009, 1011, 1013, 4408]);
    const frame = fc.oneof(
      fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b)),
      fc.string({ maxLength: 500 }),
      fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
      fc
        .record(
          {
            type: fc.constantFrom(
              'session.update',
              'input_audio_buffer.append',
              'input_audio_buffer.commit',
              'x',
            ),
            session: fc.jsonValue({ maxDepth: 3 }),
            audio: fc.oneof(fc.base64String({ maxLength: 400 }), fc.jsonValue({ maxDepth: 2 })),
            prompt: fc.string({ maxLength: 2100 }),
          },
          { requiredKeys: ['type'] },
        )
        .map((v) => JSON.stringify(v)),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(frame, { minLength: 1, maxLength: 8 }), async (frames) => {
        const ws = new WebSocket(ctx().url, { headers: { authorization: `Bearer ${key}` } });
        const closed = new Promise<number>((resolve) => {
          ws.once('close', (code) => resolve(code));
          ws.once('error', () => {});
        });
        await new Promise<void>((resolve, reject) => {
          ws.once('open', () => resolve());
          ws.once('unexpected-response', (_req, res) =>
            reject(new Error(`upgrade refused ${res.statusCode}`)),
          );
        });
        for (const f of frames) ws.send(f);
        ws.close(1000);
        const code = await Promise.race([
          closed,
          new Promise<number>((r) => setTimeout(() => (ws.terminate(), r(-1)), 15_000)),
        ]);
        expect(allowed.has(code), `close code ${code}`).to.equal(true);
      }),
      // The pro plan's 120 connections a minute bound the runs (one connection each).
      { numRuns: 100, interruptAfterTimeLimit: 90_000 },
    );
    // Still serving: a clean session opens.
    const ws = new WebSocket(ctx().url, { headers: { authorization: `Bearer ${key}` } });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    ws.close(1000);
    expect(leaks(ctx().logs.lines.join('\n'), [key])).to.deep.equal([]);
  });
});
