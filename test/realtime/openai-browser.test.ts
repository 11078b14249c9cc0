/**
 * OpenAI's browser flow against the whole service as `npm start` runs it
 * (API and realtime process on one base URL, the upgrade spliced through by
 * api/realtime/proxy.ts): a backend mints an ephemeral secret with the `sk-`
 * key (POST /v1/realtime/client_secrets, and the beta
 * POST /v1/realtime/transcription_sessions), and a page in Debian's Chromium
 * opens `WS /v1/realtime` with the browser WebSocket and the subprotocols
 * OpenAI's browser client sends (`realtime`, `openai-insecure-api-key.<secret>`),
 * streams jfk.wav at 24 kHz and gets its transcript.
 */
import { expect } from 'chai';
import { chromium, type Browser } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueServiceKey, startService, type RunningService } from '../helpers/service.js';
import { wer } from '../speech/helpers.js';
import { connect, refs } from './helpers.js';
import { pcmAt } from './openaiHelpers.js';

const CHROMIUM = '/usr/bin/chromium';

describe('WS /v1/realtime from a browser with an ephemeral secret (whole service, Chromium)', function () {
  this.timeout(300_000);
  let db: TestDatabase;
  let svc: RunningService;
  let browser: Browser;
  let key: string;

  before(async () => {
    db = await createTestDatabase('stt_oa_browser');
    svc = await startService({ DATABASE_URL: db.url, STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
    ({ key } = await issueServiceKey(svc, { owner_id: 'oa-browser' }));
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  });
  after(async () => {
    await browser?.close();
    await svc?.stop();
    await db?.drop();
  });

  const post = (path: string, body: unknown, auth = `Bearer ${key}`) =>
    fetch(`${svc.baseUrl}${path}`, {
      method: 'POST',
      headers: { authorization: auth, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('mints secrets in both OpenAI shapes, only for transcription sessions and only with a key', async () => {
    const ga = await post('/v1/realtime/client_secrets', {
      session: { type: 'transcription', audio: { input: { format: { type: 'audio/pcm', rate: 24000 } } } },
    });
    expect(ga.status).to.equal(200);
    const g = (await ga.json()) as Record<string, any>;
    expect(g.value).to.match(/^rt_/);
    expect(g.expires_at).to.be.within(Date.now() / 1000 + 30, Date.now() / 1000 + 61);
    expect(g.session).to.include({ type: 'transcription' });
    const beta = await post('/v1/realtime/transcription_sessions', { input_audio_format: 'pcm16' });
    expect(beta.status).to.equal(200);
    const b = (await beta.json()) as Record<string, any>;
    expect(b.client_secret.value).to.match(/^rt_/);
    expect(b.input_audio_format).to.equal('pcm16');
    expect((await post('/v1/realtime/client_secrets', { session: { type: 'realtime' } })).status).to.equal(
      400,
    );
    expect((await post('/v1/realtime/client_secrets', {}, '')).status).to.equal(401);
    // The shapes session.update refuses are refused when minting too, not echoed.
    for (const [path, body] of [
      ['/v1/realtime/client_secrets', { session: 'str' }],
      ['/v1/realtime/client_secrets', { session: { type: 'transcription', audio: 'x' } }],
      ['/v1/realtime/client_secrets', { session: { audio: { input: 'str' } } }],
      [
        '/v1/realtime/client_secrets',
        { session: { audio: { input: { transcription: { prompt: 'a\u0000b' } } } } },
      ],
      ['/v1/realtime/transcription_sessions', { input_audio_transcription: 'x' }],
      ['/v1/realtime/transcription_sessions', { input_audio_transcription: { model: 'gpt\u202e' } }],
      ['/v1/realtime/client_secrets', { session: { audio: { input: { transcription: { model: 7 } } } } }],
      ['/v1/realtime/transcription_sessions', { input_audio_transcription: { prompt: 'a\u0007b' } }],
    ] as const) {
      const r = await post(path, body);
      expect(r.status, JSON.stringify(body)).to.equal(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).to.equal('invalid_session_update');
    }
    // And the values it refuses, with its codes (one reader and one check for both: shared/sessionUpdate).
    const long = 'word '.repeat(401);
    for (const [path, body, code, param] of [
      [
        '/v1/realtime/client_secrets',
        { session: { audio: { input: { transcription: { prompt: long } } } } },
        'invalid_session_update',
        'session.audio.input.transcription.prompt',
      ],
      [
        '/v1/realtime/transcription_sessions',
        { turn_detection: { type: 'server_vad', threshold: 2 } },
        'invalid_session_update',
        'body.turn_detection.threshold',
      ],
      [
        '/v1/realtime/client_secrets',
        { session: { audio: { input: { turn_detection: { type: 'semantic_vad', eagerness: 'eager' } } } } },
        'invalid_session_update',
        'session.audio.input.turn_detection.eagerness',
      ],
      [
        '/v1/realtime/transcription_sessions',
        { input_audio_transcription: { language: 'x1' } },
        'invalid_session_update',
        'body.input_audio_transcription.language',
      ],
      [
        '/v1/realtime/client_secrets',
        { session: { audio: { input: { format: { type: 'audio/pcmu' } } } } },
        'unsupported_audio_format',
        '',
      ],
      [
        '/v1/realtime/transcription_sessions',
        { turn_detection: { type: 'magic' } },
        'unsupported_turn_detection',
        '',
      ],
    ] as const) {
      const r = await post(path, body);
      const { error } = (await r.json()) as { error: { code: string; message: string } };
      expect(`${r.status} ${error.code}`, JSON.stringify(body)).to.equal(`400 ${code}`);
      expect(error.message).to.include(param);
      // session.update on /v1/realtime refuses the same session with the same code.
      const form = path.endsWith('client_secrets') ? 'session.update' : 'transcription_session.update';
      const ws = await connect(`${svc.baseUrl.replace('http', 'ws')}/v1/realtime?intent=transcription`, {
        headers: { authorization: `Bearer ${key}` },
      });
      await ws.next('session.created');
      ws.send({ type: form, session: 'session' in body ? body.session : body });
      expect((await ws.next('error')).error.code, JSON.stringify(body)).to.equal(code);
      ws.ws.close();
    }
    const tabs = await post('/v1/realtime/transcription_sessions', {
      input_audio_transcription: { prompt: 'Kubernetes,\tGrafana\nPostgres' },
    });
    expect(tabs.status).to.equal(200);
    // The beta secret echoes the turn detection a session opened with it has (not OpenAI's 500 ms).
    const session = await connect(`${svc.baseUrl.replace('http', 'ws')}/v1/realtime?intent=transcription`, {
      headers: { authorization: `Bearer ${b.client_secret.value}`, 'openai-beta': 'realtime=v1' },
    });
    const created = await session.next('transcription_session.created');
    session.ws.close();
    expect(created.session.turn_detection).to.deep.equal(b.turn_detection);
    expect(b.turn_detection).to.include({ type: 'server_vad', silence_duration_ms: 300 });
    // The WebSocket path is not a REST resource.
    expect((await fetch(`${svc.baseUrl}/v1/realtime`)).status).to.equal(426);
  });

  it('a page opens WS /v1/realtime with the secret in the subprotocol and receives the transcript of the clip', async () => {
    const res = await post('/v1/realtime/client_secrets', { session: { type: 'transcription' } });
    const { value: secret } = (await res.json()) as { value: string };
    const pcm = Buffer.concat([pcmAt('jfk.wav', 24000), Buffer.alloc(24000 * 2)]);
    const chunks: string[] = [];
    for (let off = 0; off < pcm.length; off += 4800)
      chunks.push(pcm.subarray(off, off + 4800).toString('base64'));
    const page = await browser.newPage();
    await page.goto(`${svc.baseUrl}/health`);
    const wsUrl = `${svc.baseUrl.replace('http', 'ws')}/v1/realtime?model=gpt-4o-transcribe`;
    const got = await page.evaluate(
      ({ url, secret, chunks }) =>
        new Promise<{ protocol: string; types: string[]; transcripts: string[] }>((resolve, reject) => {
          const ws = new WebSocket(url, ['realtime', `openai-insecure-api-key.${secret}`]);
          const events: { type: string; transcript?: string }[] = [];
          const timer = setTimeout(
            () => reject(new Error(JSON.stringify(events.map((e) => e.type)))),
            240_000,
          );
          ws.onerror = () => reject(new Error('websocket error'));
          ws.onopen = () => {
            ws.send(
              JSON.stringify({
                type: 'session.update',
                session: {
                  type: 'transcription',
                  audio: {
                    input: {
                      format: { type: 'audio/pcm', rate: 24000 },
                      transcription: { model: 'gpt-4o-transcribe', language: 'en' },
                      turn_detection: { type: 'server_vad', silence_duration_ms: 500 },
                    },
                  },
                },
              }),
            );
            for (const audio of chunks) ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio }));
          };
          ws.onmessage = (m) => {
            const ev = JSON.parse(m.data as string);
            events.push(ev);
            const committed = events.filter((e) => e.type === 'input_audio_buffer.committed').length;
            const done = events.filter(
              (e) => e.type === 'conversation.item.input_audio_transcription.completed',
            );
            if (committed > 0 && done.length === committed) {
              clearTimeout(timer);
              const protocol = ws.protocol;
              ws.close();
              resolve({
                protocol,
                types: events.map((e) => e.type),
                transcripts: done.map((e) => e.transcript ?? ''),
              });
            }
          };
        }),
      { url: wsUrl, secret, chunks },
    );
    await page.close();
    expect(got.protocol).to.equal('realtime');
    expect(got.types[0]).to.equal('session.created');
    expect(got.types).to.include('session.updated');
    expect(got.types).to.include('conversation.item.input_audio_transcription.delta');
    expect(wer(refs().get('jfk.wav')!, got.transcripts.join(' '))).to.be.below(0.5);
  });
});
