import fs from 'node:fs';
import { expect } from 'chai';
import request from 'supertest';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import { createEngineApp } from '../../engine/app.js';
import { RemotePool } from '../../shared/stt/remote.js';
import type { SpeechError } from '../../shared/stt/types.js';
import { clip, pcmOf } from './helpers.js';
import { seriesValue } from '../helpers/metrics.js';

describe('speech: engine worker HTTP surface (engine/app.ts)', function () {
  this.timeout(30_000);
  const config = loadConfig({
    STT_THREADS: '1',
    ENGINE_API_KEY: 'worker-secret',
    SEGMENT_MAX_UPLOAD_MB: '0.5',
  });
  const logger = createLogger({ level: 'silent' });
  let engine: BuiltinEngine;
  let server: ReturnType<ReturnType<typeof createEngineApp>['callback']>;
  const wav = fs.readFileSync(clip('librivox-austen-0880.wav').path);

  before(async () => {
    engine = new BuiltinEngine(config.speech.builtin, logger);
    server = createEngineApp({ engine, speech: config.speech, logger }).callback();
    await engine.ready();
  });
  after(() => engine.close());

  const post = () =>
    request(server).post('/v1/audio/transcriptions').set('Authorization', 'Bearer worker-secret');

  it('is healthy once a decoder is loaded and lists its one model', async () => {
    const health = await request(server).get('/health').expect(200);
    expect(health.body).to.include({ ok: true, service: 'stt-engine', threads: 1 });
    const models = await request(server)
      .get('/v1/models')
      .set('Authorization', 'Bearer worker-secret')
      .expect(200);
    expect(models.body.data.map((m: { id: string }) => m.id)).to.deep.equal(['pocketsphinx-en-us']);
  });

  it('GET /readyz: 200 with a decoder loaded, 503 once the worker drains', async () => {
    let draining = false;
    const app = createEngineApp({
      engine,
      speech: config.speech,
      logger,
      draining: () => draining,
    }).callback();
    const ready = await request(app).get('/readyz').expect(200);
    expect(ready.body).to.deep.include({ ok: true, checks: { decoder: true, accepting: true } });
    draining = true;
    const gone = await request(app).get('/readyz').expect(503);
    expect(gone.body.checks).to.deep.equal({ decoder: true, accepting: false });
    // Liveness is not readiness: /health stays 200 while requests in flight finish.
    await request(app).get('/health').expect(200);
  });

  it('serves /metrics: its transcriptions by outcome and engine time (guarded by METRICS_TOKEN when set)', async () => {
    const scrape = async () => (await request(server).get('/metrics').expect(200)).text;
    const before = await scrape();
    await post().attach('file', wav, 'a.wav').expect(200);
    const after = await scrape();
    const ok = { engine: 'builtin', outcome: 'ok' };
    expect(seriesValue(after, 'stt_speech_requests_total', ok)).to.equal(
      seriesValue(before, 'stt_speech_requests_total', ok) + 1,
    );
    expect(after).to.match(/^stt_speech_engine_seconds_bucket\{le="1",engine="builtin"\} \d+$/m);
    const guarded = createEngineApp({
      engine,
      speech: config.speech,
      logger,
      metrics: { enabled: true, token: 'scrape-me' },
    }).callback();
    expect((await request(guarded).get('/metrics')).status).to.equal(401);
    await request(guarded).get('/metrics').set('Authorization', 'Bearer scrape-me').expect(200);
  });

  it('requires ENGINE_API_KEY when set', async () => {
    const res = await request(server).post('/v1/audio/transcriptions').attach('file', wav, 'a.wav');
    expect(res.status).to.equal(401);
    expect(res.body.error).to.include({ code: 'invalid_api_key', type: 'authentication_error' });
  });

  it('answers json by default (as OpenAI does) and carries its thread id', async () => {
    const res = await post().attach('file', wav, 'a.wav').field('model', 'whisper-1').expect(200);
    expect(Object.keys(res.body)).to.deep.equal(['text']);
    expect(res.headers['x-worker-id']).to.equal('builtin-0');
  });

  it('refuses bad requests with 4xx (a pool does not fail over on them) in the OpenAI error shape', async () => {
    const cases: [request.Test, number, string][] = [
      [post().send({ a: 1 }), 400, 'invalid_content_type'],
      [post().field('model', 'x'), 400, 'missing_file'],
      [post().attach('file', Buffer.from('nope'), 'a.wav'), 400, 'invalid_audio'],
      [post().attach('file', wav, 'a.wav').field('language', 'ja'), 400, 'unsupported_language'],
      [post().attach('file', wav, 'a.wav').field('response_format', 'xml'), 400, 'invalid_response_format'],
      [post().attach('file', Buffer.alloc(600 * 1024), 'big.wav'), 413, 'file_too_large'],
      [request(server).get('/nope'), 404, 'not_found'],
    ];
    for (const [req, status, code] of cases) {
      const res = await req.catch((e: { response?: request.Response }) => e.response!);
      expect(res.status, code).to.equal(status);
      expect(res.body.error.code).to.equal(code);
    }
  });

  it('refuses clips longer than ENGINE_MAX_AUDIO_SECONDS with 400 audio_too_long', async () => {
    const capped = loadConfig({ STT_THREADS: '1', ENGINE_MAX_AUDIO_SECONDS: '1' }).speech;
    const app = createEngineApp({ engine, speech: capped, logger }).callback();
    const res = await request(app).post('/v1/audio/transcriptions').attach('file', wav, 'a.wav');
    expect(res.status).to.equal(400);
    expect(res.body.error).to.include({ code: 'audio_too_long', type: 'invalid_request_error' });
    const short = await request(app)
      .post('/v1/audio/transcriptions')
      .attach('file', wav.subarray(0, 44 + 16000), 'short.wav');
    expect(short.status, JSON.stringify(short.body)).to.equal(200);
  });

  it('is reachable by the remote pool with STT_WORKER_API_KEY; a wrong key counts as that worker failing', async () => {
    const http = await import('node:http');
    const listener = http.createServer(server);
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    const { port } = listener.address() as import('node:net').AddressInfo;
    const url = `http://127.0.0.1:${port}`;
    try {
      const remote = (apiKey: string) =>
        new RemotePool(
          loadConfig({
            STT_WORKER_URLS: `w1=${url}`,
            STT_WORKER_API_KEY: apiKey,
            STT_ATTEMPT_TIMEOUT_MS: '10000',
            STT_BUDGET_MS: '20000',
          }).speech.remote,
          logger,
        );
      const good = remote('worker-secret');
      const r = await good.transcribe({ pcm: pcmOf(clip('librivox-austen-0880.wav').path), language: 'en' });
      expect(r).to.include({ workerId: 'w1', fallbackUsed: false, language: 'en' });
      expect(r.words.length).to.be.greaterThan(3);
      await good.close();
      const bad = remote('wrong');
      const err = (await bad.transcribe({ pcm: Buffer.alloc(3200) }).catch((e: unknown) => e)) as SpeechError;
      expect(err.code).to.equal('transcription_failed');
      expect(err.retryable).to.equal(true);
      expect(err.message).to.match(/HTTP 401/);
      await bad.close();
    } finally {
      listener.close();
    }
  });
});
