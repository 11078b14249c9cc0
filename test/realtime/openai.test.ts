/**
 * `WS /v1/realtime`: OpenAI's Realtime protocol for transcription sessions
 * (issue 25) on the real realtime tier (uWS, Postgres, built-in engine,
 * silero VAD). Spoken to by a plain `ws` client, and by the official
 * `openai` SDK's realtime WebSocket client, unchanged, which only connects
 * with wss://: a Node TLS server with an openssl-made certificate terminates
 * TLS in front of the realtime port, and the SDK trusts it through the ws
 * options it passes on. The clip is test/audio/jfk.wav converted to 24 kHz
 * by ffmpeg.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import { wer } from '../speech/helpers.js';
import { pcmAt, selfSigned, tlsFront } from './openaiHelpers.js';
import {
  bearer,
  connect,
  createRealtimeContext,
  eventually,
  refs,
  refused,
  usageRows,
  type Client,
  type RealtimeTestContext,
} from './helpers.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const DELTA = 'conversation.item.input_audio_transcription.delta';
const JFK_REF = refs().get('jfk.wav')!;

describe('WS /v1/realtime: OpenAI Realtime transcription sessions', function () {
  this.timeout(240_000);
  let engine: BuiltinEngine;
  let ctx: RealtimeTestContext;
  let openaiUrl: string;
  const JFK24 = pcmAt('jfk.wav', 24000);
  const JFK16 = pcmAt('jfk.wav', 16000);

  before(async () => {
    const config = loadConfig({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
    engine = new BuiltinEngine(config.speech.builtin, createLogger({ level: 'warn' }));
    await engine.ready();
    ctx = await createRealtimeContext({ engine, env: { REALTIME_TRANSCRIBE_TIMEOUT_MS: '120000' } });
    openaiUrl = `ws://127.0.0.1:${ctx.rt.port}/v1/realtime`;
  });
  after(async () => {
    await ctx?.close();
    await engine?.close();
  });

  /** Appends `pcm` in 100 ms base64 appends (as the SDK's users do), then `tail` ms of silence. */
  function append(c: Client, pcm: Buffer, rate: number, tailMs = 1200) {
    const frame = (rate / 10) * 2;
    const all = Buffer.concat([pcm, Buffer.alloc(((rate * tailMs) / 1000) * 2)]);
    for (let off = 0; off < all.length; off += frame) {
      c.send({ type: 'input_audio_buffer.append', audio: all.subarray(off, off + frame).toString('base64') });
    }
  }

  /**
   * Waits until every turn that started has stopped, every committed item has its completed (or
   * failed) event, and nothing new comes for a second (audio sent faster than real time may still be
   * held back while a pause is judged).
   */
  const allDone = (c: Client) =>
    c.finals(200_000, 1000, (evs) => {
      const count = (type: string) => evs.filter((e) => e.type === type).length;
      const committed = count('input_audio_buffer.committed');
      return (
        count('input_audio_buffer.speech_started') === count('input_audio_buffer.speech_stopped') &&
        committed > 0 &&
        count(COMPLETED) + count('conversation.item.input_audio_transcription.failed') === committed
      );
    });

  const transcript = (c: Client) =>
    c
      .of('input_audio_buffer.committed')
      .map((cm) => c.events.find((e) => e.type === COMPLETED && e.item_id === cm.item_id)?.transcript ?? '')
      .join(' ');

  it('GA form at 24 kHz: session.created/updated, VAD events with item ids, delta then completed with usage, on the client clock', async () => {
    const { key, id } = await ctx.issueKey('pro');
    const c = await connect(`${openaiUrl}?model=gpt-4o-transcribe`, bearer(key));
    const created = await c.next('session.created');
    expect(created.event_id).to.be.a('string');
    expect(created.session).to.include({ type: 'transcription', object: 'realtime.transcription_session' });
    expect(created.session.audio.input.format).to.deep.equal({ type: 'audio/pcm', rate: 24000 });
    expect(created.session.audio.input.transcription.model).to.equal('gpt-4o-transcribe');
    // The default is the fixed window; semantic_vad is opt-in (docs/decisions/turns.md, "Turn ends").
    expect(created.session.audio.input.turn_detection.type).to.equal('server_vad');
    c.send({
      type: 'session.update',
      event_id: 'evt_client_1',
      session: {
        type: 'transcription',
        audio: {
          input: {
            format: { type: 'audio/pcm', rate: 24000 },
            transcription: { model: 'gpt-4o-mini-transcribe', language: 'en', prompt: '' },
            turn_detection: {
              type: 'server_vad',
              threshold: 0.5,
              prefix_padding_ms: 300,
              silence_duration_ms: 500,
            },
            noise_reduction: { type: 'near_field' },
          },
        },
      },
    });
    const updated = await c.next('session.updated');
    expect(updated.session.audio.input.transcription).to.deep.include({
      model: 'gpt-4o-mini-transcribe',
      language: 'en',
    });
    expect(updated.session.audio.input.turn_detection).to.deep.equal({
      type: 'server_vad',
      threshold: 0.5,
      prefix_padding_ms: 300,
      silence_duration_ms: 500,
    });
    expect(updated.session.audio.input.noise_reduction).to.deep.equal({ type: 'near_field' });
    append(c, JFK24, 24000);
    await allDone(c);
    const started = c.of('input_audio_buffer.speech_started');
    const stopped = c.of('input_audio_buffer.speech_stopped');
    const committed = c.of('input_audio_buffer.committed');
    expect(started.length).to.equal(committed.length);
    expect(stopped.length).to.equal(committed.length);
    for (let i = 0; i < committed.length; i++) {
      const item = committed[i].item_id;
      expect(item).to.match(/^item_/);
      expect(started[i].item_id).to.equal(item);
      expect(stopped[i].item_id).to.equal(item);
      expect(committed[i].previous_item_id).to.equal(i === 0 ? null : committed[i - 1].item_id);
      const pos = (t: string) => c.events.findIndex((e) => e.type === t && e.item_id === item);
      expect(pos('input_audio_buffer.speech_started')).to.be.lessThan(
        pos('input_audio_buffer.speech_stopped'),
      );
      expect(pos('input_audio_buffer.speech_stopped')).to.be.lessThan(pos('input_audio_buffer.committed'));
      expect(pos('input_audio_buffer.committed')).to.be.lessThan(pos(DELTA));
      expect(pos(DELTA)).to.be.lessThan(pos(COMPLETED));
      const done = c.events[pos(COMPLETED)];
      expect(done.content_index).to.equal(0);
      expect(done.usage.type).to.equal('duration');
      expect(done.usage.seconds).to.be.greaterThan(0.25);
      expect(c.events[pos(DELTA)].delta).to.equal(done.transcript);
      // Positions in ms of the client's audio (11 s of speech, then 1.2 s of silence).
      expect(committed[i].audio_end_ms).to.be.greaterThan(committed[i].audio_start_ms);
      expect(stopped[i].audio_end_ms).to.equal(committed[i].audio_end_ms);
    }
    expect(committed.at(-1)!.audio_end_ms).to.be.within(10_000, 12_400);
    expect(wer(JFK_REF, transcript(c))).to.be.below(0.5);
    c.ws.close(1000);
    await c.closed;
    // Metered like a native session: one final usage row with the seconds of the client's audio.
    const sessionId = created.session.id as string;
    const rows = await eventually(
      () => usageRows(ctx, sessionId),
      (r) => r.length === 1 && r[0].status === 'final',
    );
    expect(rows[0].key_id).to.equal(id);
    expect(Number(rows[0].audio_seconds)).to.be.closeTo(JFK24.length / 48000 + 1.2, 0.01);
  });

  it('the same words from 24 kHz and 16 kHz audio as from the native stream at 16 kHz', async () => {
    const { key } = await ctx.issueKey('pro');
    const texts: string[] = [];
    for (const rate of [24000, 16000]) {
      const c = await connect(`${openaiUrl}?intent=transcription`, bearer(key));
      await c.next('session.created');
      c.send({
        type: 'session.update',
        session: { type: 'transcription', audio: { input: { format: { type: 'audio/pcm', rate } } } },
      });
      expect((await c.next('session.updated')).session.audio.input.format.rate).to.equal(rate);
      append(c, rate === 24000 ? JFK24 : JFK16, rate);
      await allDone(c);
      texts.push(transcript(c));
      c.ws.close(1000);
    }
    const n = await connect(ctx.url, bearer(key));
    await n.next('session.created');
    await n.stream(Buffer.concat([JFK16, Buffer.alloc(38400)]));
    await n.finals(200_000);
    const native = n
      .of(COMPLETED)
      .sort((a, b) => a.utterance_index - b.utterance_index)
      .map((e) => e.text)
      .join(' ');
    n.ws.close(1000);
    expect(texts[1], '16 kHz is the native path').to.equal(native);
    expect(wer(JFK_REF, texts[0])).to.be.at.most(wer(JFK_REF, native) + 0.1);
  });

  it('beta form: transcription_session.* with OpenAI-Beta, pcm16; turn_detection null and commit end the turn; clear drops it', async () => {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(`${openaiUrl}?intent=transcription`, {
      headers: { authorization: `Bearer ${key}`, 'openai-beta': 'realtime=v1' },
    });
    const created = await c.next('transcription_session.created');
    expect(created.session.input_audio_format).to.equal('pcm16');
    c.send({
      type: 'transcription_session.update',
      session: {
        input_audio_format: 'pcm16',
        input_audio_transcription: { model: 'whisper-1', language: 'en' },
        turn_detection: null,
        input_audio_noise_reduction: null,
      },
    });
    const up = await c.next('transcription_session.updated');
    expect(up.session.turn_detection).to.equal(null);
    expect(up.session.input_audio_transcription).to.include({ model: 'whisper-1', language: 'en' });
    // A commit before any audio: OpenAI's empty-buffer error.
    c.send({ type: 'input_audio_buffer.commit', event_id: 'evt_c0' });
    const empty = await c.next('error');
    expect(empty.error).to.include({ code: 'input_audio_buffer_commit_empty', event_id: 'evt_c0' });
    // The whole clip, one turn ended by the commit (no VAD events without turn detection).
    append(c, JFK24, 24000, 0);
    c.send({ type: 'input_audio_buffer.commit' });
    await allDone(c);
    expect(c.of('input_audio_buffer.speech_started')).to.have.length(0);
    expect(c.of('input_audio_buffer.committed')).to.have.length(1);
    // Speech, then cleared: no turn and no transcript for it; a commit after it has nothing to commit.
    const from = c.events.length;
    append(c, JFK24.subarray(0, 48000 * 2), 24000, 0);
    c.send({ type: 'input_audio_buffer.clear' });
    await c.next('input_audio_buffer.cleared', 20_000, from);
    c.send({ type: 'input_audio_buffer.commit', event_id: 'evt_c1' });
    await c.waitFor((evs) => evs.slice(from).some((e) => e.type === 'error'));
    expect(c.events.slice(from).find((e) => e.type === 'error')!.error.event_id).to.equal('evt_c1');
    expect(c.of('input_audio_buffer.committed')).to.have.length(1);
    expect(c.of(COMPLETED)).to.have.length(1);
    // One 11 s turn (no VAD cuts): as accurate as the engine on the whole clip at once.
    const whole = (await engine.transcribe({ pcm: JFK16, language: 'en' })).text;
    expect(wer(JFK_REF, transcript(c)), transcript(c)).to.be.at.most(wer(JFK_REF, whole) + 0.1);
    c.ws.close(1000);
  });

  it('refuses what it does not serve, in OpenAI error shape, and keeps the session', async () => {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(openaiUrl, bearer(key));
    await c.next('session.created');
    const tries: [unknown, string][] = [
      [{ type: 'response.create' }, 'unknown_type'],
      [{ type: 'session.update', session: { type: 'realtime' } }, 'unsupported_session_type'],
      [
        { type: 'session.update', session: { audio: { input: { format: { type: 'audio/pcmu' } } } } },
        'unsupported_audio_format',
      ],
      [
        {
          type: 'session.update',
          session: { audio: { input: { turn_detection: { type: 'vad_of_my_own' } } } },
        },
        'unsupported_turn_detection',
      ],
      [
        { type: 'transcription_session.update', session: { input_audio_format: 'g711_ulaw' } },
        'unsupported_audio_format',
      ],
      [{ type: 'input_audio_buffer.append', audio: '%%%' }, 'invalid_audio'],
      // Containers of the wrong type are refused, not ignored.
      [{ type: 'session.update', session: { type: 'transcription', audio: 'x' } }, 'invalid_session_update'],
      [{ type: 'session.update', session: { audio: { input: 'str' } } }, 'invalid_session_update'],
      [
        { type: 'session.update', session: { audio: { input: { transcription: { prompt: 'a\u0000b' } } } } },
        'invalid_session_update',
      ],
    ];
    for (const [msg, code] of tries) {
      const from = c.events.length;
      c.send(msg);
      await c.waitFor((evs) => evs.slice(from).some((e) => e.type === 'error'));
      const err = c.events.slice(from).find((e) => e.type === 'error')!;
      expect(err.error, JSON.stringify(msg)).to.include({ type: 'invalid_request_error', code });
    }
    // The field at fault is named in the client's own form.
    for (const [msg, param] of [
      [{ type: 'session.update', session: { audio: { input: 'str' } } }, 'session.audio.input'],
      [{ type: 'session.update', session: { audio: 'x' } }, 'session.audio'],
      [
        { type: 'transcription_session.update', session: { input_audio_transcription: 'str' } },
        'session.input_audio_transcription',
      ],
    ] as const) {
      const at = c.events.length;
      c.send(msg);
      await c.waitFor((evs) => evs.slice(at).some((e) => e.type === 'error'));
      const err = c.events.slice(at).find((e) => e.type === 'error')!;
      expect(err.error, JSON.stringify(msg)).to.include({ code: 'invalid_session_update', param });
      expect(err.error.message).to.include(param);
    }
    const from = c.events.length;
    c.send({
      type: 'session.update',
      session: { audio: { input: { turn_detection: { type: 'server_vad', threshold: 1.5 } } } },
    });
    await c.waitFor((evs) => evs.slice(from).some((e) => e.type === 'error'));
    expect(c.events.at(-1)!.error).to.include({
      code: 'invalid_session_update',
      param: 'session.audio.input.turn_detection.threshold',
    });
    // semantic_vad: OpenAI's eagerness levels, validated; answered with the effective turn detection.
    const at = c.events.length;
    c.send({
      type: 'session.update',
      session: { audio: { input: { turn_detection: { type: 'semantic_vad', eagerness: 'eager' } } } },
    });
    await c.waitFor((evs) => evs.slice(at).some((e) => e.type === 'error'));
    expect(c.events.at(-1)!.error).to.include({
      code: 'invalid_session_update',
      param: 'session.audio.input.turn_detection.eagerness',
    });
    c.send({
      type: 'session.update',
      session: { audio: { input: { turn_detection: { type: 'semantic_vad', eagerness: 'high' } } } },
    });
    const up = await c.next('session.updated');
    expect(up.session.audio.input.turn_detection).to.deep.equal({ type: 'semantic_vad', eagerness: 'high' });
    c.ws.close(1000);
  });

  it('credentials: Bearer sk-, rt_ in the browser subprotocol (answered "realtime"), never sk- in a subprotocol or the URL', async () => {
    const { key } = await ctx.issueKey('pro');
    expect((await refused(openaiUrl)).status).to.equal(401);
    const { default: WebSocket } = await import('ws');
    const viaSub = (protocols: string[]) =>
      new Promise<{ protocol: string } | { status: number }>((resolve) => {
        const ws = new WebSocket(openaiUrl, protocols);
        ws.once('open', () => {
          resolve({ protocol: ws.protocol });
          ws.close();
        });
        ws.once('unexpected-response', (_req, res) => resolve({ status: res.statusCode! }));
        ws.once('error', () => {});
      });
    const principal = await ctx.auth.authenticate(key);
    expect(principal.ok).to.equal(true);
    if (!principal.ok) throw new Error('key not accepted');
    const token = ctx.auth.issueSessionToken(principal.principal);
    expect(token).to.have.property('token');
    const rt = (token as { token: string }).token;
    expect(await viaSub(['realtime', `openai-insecure-api-key.${rt}`])).to.deep.equal({
      protocol: 'realtime',
    });
    expect(await viaSub(['realtime', `openai-insecure-api-key.${key}`])).to.deep.equal({ status: 401 });
    expect((await refused(`${openaiUrl}?access_token=${key}`)).status).to.equal(401);
  });

  it('the official openai SDK (OpenAIRealtimeWS), unchanged, over wss:// gets the transcript of the clip', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oa-tls-'));
    const creds = selfSigned(dir);
    const front = await tlsFront(ctx.rt.port, creds);
    try {
      const { key } = await ctx.issueKey('pro');
      const client = new OpenAI({ apiKey: key, baseURL: `https://127.0.0.1:${front.port}/v1` });
      // The SDK passes `options` to its `ws` WebSocket: here, trust for the test's own certificate.
      const rt = new OpenAIRealtimeWS({ model: 'gpt-4o-transcribe', options: { ca: creds.cert } }, client);
      const seen: Record<string, any>[] = [];
      const errors: unknown[] = [];
      rt.on('event', (e) => seen.push(e as never));
      rt.on('error', (e) => errors.push(e));
      await new Promise<void>((resolve, reject) => {
        rt.socket.once('open', () => resolve());
        rt.socket.once('error', reject);
      });
      rt.send({
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
      });
      const pcm = Buffer.concat([JFK24, Buffer.alloc(24000 * 2)]);
      for (let off = 0; off < pcm.length; off += 4800) {
        rt.send({
          type: 'input_audio_buffer.append',
          audio: pcm.subarray(off, off + 4800).toString('base64'),
        });
      }
      const completed: string[] = [];
      await new Promise<void>((resolve, reject) => {
        // Seen once in CI: nothing after session.created for 200 s. Say what the socket and the server did.
        const why = (what: string) =>
          new Error(
            `${what}; saw ${seen.map((e) => e.type)}; client errors ${JSON.stringify(errors.map(String))}\n` +
              ctx.logs.lines.slice(-15).join('\n'),
          );
        const t = setTimeout(() => reject(why('no transcript')), 200_000);
        rt.socket.once('close', (code: number, reason: Buffer) => {
          clearTimeout(t);
          reject(why(`socket closed ${code} ${String(reason)} before the transcript`));
        });
        const check = () => {
          const committed = seen.filter((e) => e.type === 'input_audio_buffer.committed').length;
          const done = seen.filter((e) => e.type === COMPLETED);
          if (committed > 0 && done.length === committed) {
            clearTimeout(t);
            completed.push(...done.map((e) => e.transcript as string));
            resolve();
          }
        };
        rt.on('conversation.item.input_audio_transcription.completed', check);
      });
      rt.close();
      expect(errors).to.deep.equal([]);
      expect(seen[0].type).to.equal('session.created');
      expect(seen.some((e) => e.type === 'session.updated')).to.equal(true);
      expect(wer(JFK_REF, completed.join(' '))).to.be.below(0.5);
    } finally {
      await front.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
