/**
 * Realtime protocol against a real uWS server and a real `ws` client, with a
 * scripted speech engine (real speech recognition is in speech.test.ts).
 */
import { expect } from 'chai';
import {
  createRealtimeContext,
  connect,
  bearer,
  readPcm,
  silence,
  ScriptedEngine,
  type RealtimeTestContext,
  type Client,
} from './helpers.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const JFK = readPcm('jfk.wav');
const AUSTEN = readPcm('librivox-austen-0880.wav');

async function usageRows(ctx: RealtimeTestContext, sessionId: string) {
  return ctx.db('usage_events').where({ plane: 'realtime', ref_id: sessionId });
}

async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() - t0 > ms) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('realtime protocol', function () {
  this.timeout(30_000);
  let ctx: RealtimeTestContext;
  const engine = new ScriptedEngine();

  before(async () => {
    ctx = await createRealtimeContext({
      engine,
      env: {
        PLANS_JSON: JSON.stringify({
          tiny: { maxConcurrentConnections: 5, maxSessionSeconds: 2, idleTimeoutSeconds: 1, maxAudioSecondsPerSession: 900 },
          short: { maxConcurrentConnections: 5, maxAudioSecondsPerSession: 3 },
          window: { maxConcurrentConnections: 5, maxAudioSecondsPerWindow: 20 },
          one: { maxConcurrentConnections: 5, maxConcurrentUtterances: 1 },
        }),
        REALTIME_TICK_MS: '100',
      },
    });
  });
  after(async () => ctx?.close());
  beforeEach(() => {
    engine.calls = [];
    engine.delayMs = 0;
    engine.failWith = null;
  });

  async function open(plan = 'pro'): Promise<{ c: Client; keyId: string }> {
    const { key, id } = await ctx.issueKey(plan);
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    return { c, keyId: id };
  }

  it('sends session.created at once with every field of 2.7, remaining audio from real usage', async () => {
    const { key, id } = await ctx.issueKey('free');
    await ctx.db('usage_events').insert({ key_id: id, plane: 'segment', ref_id: 'seed-' + id, audio_seconds: 100 });
    const c = await connect(ctx.url, bearer(key));
    const ev = await c.next('session.created');
    expect(ev.request_id).to.be.a('string').and.not.empty;
    expect(ev.session_id).to.match(/^sess_[0-9a-f]+$/);
    expect(ev.audio).to.deep.equal({ format: 'pcm_s16le', sample_rate: 16000, channels: 1 });
    expect(ev.turn_detection).to.deep.equal({ type: 'server_vad' });
    expect(ev.plan).to.equal('free');
    expect(ev.limits).to.deep.equal({
      max_concurrent_utterances: 2,
      max_session_seconds: 900,
      idle_timeout_seconds: 60,
      remaining_audio_seconds: 3500,
    });
    c.ws.close(1000);
    await c.closed;
  });

  it('streams speech: started < stopped < completed per utterance, unique increasing indexes, durations', async () => {
    const { c } = await open();
    await c.stream(Buffer.concat([JFK, silence(1200)]));
    await c.waitFor((evs) => {
      const stopped = evs.filter((e) => e.type === 'input_audio_buffer.speech_stopped').length;
      return stopped >= 2 && evs.filter((e) => e.type === COMPLETED).length === stopped;
    });
    const idx = c.of(COMPLETED).map((e) => e.utterance_index);
    expect(idx).to.deep.equal([...idx].sort((a, b) => a - b));
    expect(new Set(idx).size).to.equal(idx.length);
    expect(idx[0]).to.equal(0);
    for (const i of idx) {
      const pos = (t: string) => c.events.findIndex((e) => e.type === t && e.utterance_index === i);
      expect(pos('input_audio_buffer.speech_started')).to.be.lessThan(pos('input_audio_buffer.speech_stopped'));
      expect(pos('input_audio_buffer.speech_stopped')).to.be.lessThan(pos(COMPLETED));
      const done = c.events[pos(COMPLETED)];
      expect(done.text).to.be.a('string').and.not.empty;
      expect(done.language).to.be.a('string');
      expect(done.audio_duration_ms).to.be.greaterThan(250);
      expect(done.speech_duration_ms).to.be.at.most(done.audio_duration_ms);
      expect(done.latency_ms).to.be.a('number').and.at.least(0);
    }
    expect(c.of('input_audio_buffer.speech_stopped').every((e) => e.reason === 'end_of_speech')).to.equal(true);
    c.ws.close(1000);
    const closed = await c.closed;
    expect(closed.code).to.equal(1000);
  });

  it('accepts base64 appends and both flush spellings', async () => {
    const { c } = await open();
    const half = AUSTEN.subarray(0, 32000 * 2); // 2 s of speech, no trailing silence
    for (let off = 0; off < half.length; off += 3200) {
      c.send({ type: 'input_audio_buffer.append', audio: half.subarray(off, off + 3200).toString('base64') });
    }
    c.send({ type: 'input_audio_buffer.flush' });
    const stopped = await c.next('input_audio_buffer.speech_stopped');
    expect(stopped.reason).to.equal('flush');
    await c.next(COMPLETED);
    const from = c.events.length;
    await c.stream(AUSTEN.subarray(0, 32000));
    c.send({ type: 'flush' });
    await c.waitFor((evs) => evs.slice(from).some((e) => e.type === COMPLETED));
    c.ws.close(1000);
  });

  it('session.update: aliases, normalisation, stripping, fixed audio, translate_to, bounds', async () => {
    const { c } = await open();
    c.send({
      type: 'session.update',
      language: 'zh-CN',
      prompt: 'medical terms',
      stt_model: 'whisper-large',
      normalizer_model: 'norm-1',
      backend: 'gpu',
      vad_threshold: 0.6,
      vadSilenceMs: 700,
      vad_prefix_ms: 200,
      vad_min_speech_ms: 100,
      vadTargetSpeechMs: 8000,
      vad_max_speech_ms: 12000,
      vadSmartSplitWindowMs: 1000,
      translate_to: 'en',
      session_id: 'sess_hijack',
      request_id: 'req_hijack',
      user_id: 'someone-else',
      sample_rate: 8000,
      audio: { format: 'mp3' },
      something: 1,
    });
    const up = await c.next('session.updated');
    expect(up.session_id).to.match(/^sess_/).and.not.equal('sess_hijack');
    expect(up.request_id).to.not.equal('req_hijack');
    expect(up.audio).to.deep.equal({ format: 'pcm_s16le', sample_rate: 16000, channels: 1 });
    expect(up.session).to.include({
      language: 'zh',
      prompt: 'medical terms',
      stt_model: 'whisper-large',
      normalizer_model: 'norm-1',
      backend: 'gpu',
      vad_threshold: 0.6,
      vad_silence_ms: 700,
      vad_prefix_ms: 200,
      vad_min_speech_ms: 100,
      vad_target_speech_ms: 8000,
      vad_max_speech_ms: 12000,
      vad_smart_split_window_ms: 1000,
      translate_to: 'en',
    });
    expect(up.ignored_fields).to.include.members(['session_id', 'request_id', 'user_id', 'sample_rate', 'audio', 'something']);
    for (const [lang, want] of [['mandarin', 'zh'], ['zh-tw', 'zh'], ['AUTO', 'auto'], ['en-US', 'en']]) {
      const from = c.events.length;
      c.send({ type: 'session.update', language: lang });
      const ev = await c.next('session.updated', 5000, from);
      expect(ev.session.language, lang).to.equal(want);
    }
    const bad = async (msg: Record<string, unknown>) => {
      const from = c.events.length;
      c.send({ type: 'session.update', ...msg });
      const e = await c.next('error', 5000, from);
      expect(e.code).to.equal('invalid_session_update');
    };
    await bad({ prompt: 'x'.repeat(2001) });
    await bad({ vad_threshold: 'high' });
    await bad({ vadMaxSpeechMs: 10 });
    await bad({ language: 'not a language' });
    const from = c.events.length;
    c.send({ type: 'session.update', prompt: 'y'.repeat(2000) });
    expect((await c.next('session.updated', 5000, from)).session.prompt).to.have.length(2000);
    c.ws.close(1000);
  });

  it('a language change applies to new utterances only; the engine gets language and prompt', async () => {
    const { c } = await open();
    engine.delayMs = 300;
    c.send({ type: 'session.update', language: 'en', prompt: 'kennedy' });
    await c.next('session.updated');
    await c.stream(AUSTEN.subarray(0, 32000));
    c.send({ type: 'flush' });
    await c.next('input_audio_buffer.speech_stopped');
    const from = c.events.length;
    c.send({ type: 'session.update', language: 'french' });
    await c.next('session.updated', 5000, from);
    await c.stream(AUSTEN.subarray(0, 32000));
    c.send({ type: 'flush' });
    await c.waitFor((evs) => evs.filter((e) => e.type === COMPLETED).length === 2);
    expect(engine.calls.map((r) => r.language)).to.deep.equal(['en', 'fr']);
    expect(engine.calls[0].prompt).to.equal('kennedy');
    expect(c.of(COMPLETED).map((e) => e.language)).to.deep.equal(['en', 'fr']);
    c.ws.close(1000);
  });

  it('bad input gives error events with codes and never closes the session', async () => {
    const { c } = await open();
    const cases: [unknown, string][] = [
      ['{not json', 'invalid_json'],
      ['[1,2]', 'invalid_json'],
      [{ audio: 'AAAA' }, 'missing_type'],
      [{ type: 'response.create' }, 'unknown_type'],
      [{ type: 'input_audio_buffer.append', audio: '@@@not base64@@@' }, 'invalid_audio'],
      [{ type: 'input_audio_buffer.append', audio: 'AAA=' }, 'invalid_audio'], // 2 bytes is fine... see below
      [{ type: 'input_audio_buffer.append', audio: 42 }, 'invalid_audio'],
    ];
    // 'AAA=' decodes to 2 bytes (valid); replace with an odd-length payload.
    cases[5] = [{ type: 'input_audio_buffer.append', audio: Buffer.from([1, 2, 3]).toString('base64') }, 'invalid_audio'];
    for (const [msg, code] of cases) {
      const from = c.events.length;
      c.send(msg);
      const e = await c.next('error', 5000, from);
      expect(e.code, JSON.stringify(msg)).to.equal(code);
      expect(e.message).to.be.a('string');
    }
    const from = c.events.length;
    c.ws.send(Buffer.from([1, 2, 3]));
    expect((await c.next('error', 5000, from)).code).to.equal('invalid_audio');
    // Still alive: a session.update is answered.
    c.send({ type: 'session.update', language: 'en' });
    await c.next('session.updated', 5000, from);
    c.ws.close(1000);
  });

  it('closes 1009 audio_frame_too_large for a binary frame above 1 MiB and for a huge append', async () => {
    const { c } = await open();
    c.ws.send(Buffer.alloc(1024 * 1024 + 2));
    const e = await c.next('error');
    expect(e.code).to.equal('audio_frame_too_large');
    expect(await c.closed).to.deep.equal({ code: 1009, reason: 'audio_frame_too_large' });
    const { c: c2 } = await open();
    c2.send({ type: 'input_audio_buffer.append', audio: Buffer.alloc(1024 * 1024 + 2).toString('base64') });
    expect((await c2.closed).code).to.equal(1009);
    // Exactly 1 MiB is accepted.
    const { c: c3 } = await open();
    c3.ws.send(Buffer.alloc(1024 * 1024));
    c3.send({ type: 'session.update' });
    await c3.next('session.updated');
    c3.ws.close(1000);
  });

  it('closes 4408 idle_timeout without audio; silent frames keep the session alive', async () => {
    const { c } = await open('tiny');
    const t0 = Date.now();
    const res = await c.closed;
    expect(res).to.deep.equal({ code: 4408, reason: 'idle_timeout' });
    expect(Date.now() - t0).to.be.within(700, 4000);
  });

  it('closes 1008 session_duration_limit at max_session_seconds even while audio flows', async () => {
    const { c } = await open('tiny');
    const sending = setInterval(() => c.ws.readyState === 1 && c.ws.send(silence(100)), 100);
    const res = await c.closed;
    clearInterval(sending);
    expect(res).to.deep.equal({ code: 1008, reason: 'session_duration_limit' });
  });

  it('closes 1008 session_audio_limit after the per-session budget, finishing the open utterance, and bills once', async () => {
    const { c } = await open('short');
    const sid = c.events[0].session_id;
    await c.stream(Buffer.concat([AUSTEN, AUSTEN]));
    const res = await c.closed;
    expect(res).to.deep.equal({ code: 1008, reason: 'session_audio_limit' });
    expect(c.of(COMPLETED).length).to.equal(c.of('input_audio_buffer.speech_stopped').length);
    const rows = await eventually(() => usageRows(ctx, sid), (r) => r.length > 0);
    expect(rows).to.have.length(1);
    expect(rows[0].audio_seconds).to.be.within(2.9, 3.1);
  });

  it('closes 1008 audio_quota_exhausted when the window budget runs out (and at once when none is left)', async () => {
    const { key, id } = await ctx.issueKey('window');
    await ctx.db('usage_events').insert({ key_id: id, plane: 'segment', ref_id: 'seed-w-' + id, audio_seconds: 18 });
    const c = await connect(ctx.url, bearer(key));
    const created = await c.next('session.created');
    expect(created.limits.remaining_audio_seconds).to.equal(2);
    await c.stream(AUSTEN);
    expect(await c.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
    await eventually(() => usageRows(ctx, created.session_id), (r) => r.length > 0);
    const c2 = await connect(ctx.url, bearer(key));
    const created2 = await c2.next('session.created');
    expect(created2.limits.remaining_audio_seconds).to.equal(0);
    expect(await c2.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
  });

  it('meters usage exactly once at a normal close', async () => {
    const { c } = await open();
    const sid = c.events[0].session_id;
    await c.stream(AUSTEN.subarray(0, 64000)); // 2 s
    await new Promise((r) => setTimeout(r, 100));
    c.ws.close(1000);
    await c.closed;
    const rows = await eventually(() => usageRows(ctx, sid), (r) => r.length > 0);
    expect(rows).to.have.length(1);
    expect(rows[0].audio_seconds).to.be.closeTo(2, 0.01);
  });

  it('meters usage when the client vanishes without a close frame', async () => {
    const { c } = await open();
    const sid = c.events[0].session_id;
    await c.stream(AUSTEN.subarray(0, 32000)); // 1 s
    await new Promise((r) => setTimeout(r, 100));
    c.ws.terminate();
    const rows = await eventually(() => usageRows(ctx, sid), (r) => r.length > 0);
    expect(rows).to.have.length(1);
    expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
  });

  it('an unexpected failure inside the gateway closes 1011 client_error (and still meters)', async () => {
    const { c } = await open();
    const sid = c.events[0].session_id;
    c.send({ type: 'session.update', vad: false });
    await c.next('session.updated');
    await c.stream(AUSTEN.subarray(0, 16000));
    engine.throwSync = true;
    try {
      c.send({ type: 'flush' });
      expect(await c.closed).to.deep.equal({ code: 1011, reason: 'client_error' });
    } finally {
      engine.throwSync = false;
    }
    const rows = await eventually(() => usageRows(ctx, sid), (r) => r.length > 0);
    expect(rows).to.have.length(1);
  });

  it('drops frames with service.throttled beyond max_concurrent_utterances', async () => {
    const { c } = await open('one');
    engine.delayMs = 1500;
    c.send({ type: 'session.update', vad: false });
    await c.next('session.updated');
    await c.stream(AUSTEN.subarray(0, 16000));
    c.send({ type: 'flush' });
    await c.next('input_audio_buffer.speech_stopped');
    await c.stream(AUSTEN.subarray(0, 16000));
    const th = await c.next('service.throttled');
    expect(th.reason).to.equal('max_concurrent_utterances');
    expect(th.dropped_bytes).to.be.greaterThan(0);
    await c.next(COMPLETED);
    expect(engine.calls).to.have.length(1);
    c.ws.close(1000);
  });

  it('a failed transcription yields an error event and a completed event with empty text and error', async () => {
    const { c } = await open();
    engine.failWith = Object.assign(new Error('worker exploded'), { code: 'transcription_failed' });
    await c.stream(AUSTEN.subarray(0, 32000));
    c.send({ type: 'flush' });
    const err = await c.next('error');
    expect(err).to.include({ code: 'transcription_failed', utterance_index: 0 });
    const done = await c.next(COMPLETED);
    expect(done.text).to.equal('');
    expect(done.error.code).to.equal('transcription_failed');
    c.ws.close(1000);
    engine.failWith = null;
    ctx.rt.breaker.success();
  });

  it('vadMaxSpeechMs splits continuous speech (max_duration) and the next segment starts at once', async () => {
    const { c } = await open();
    c.send({ type: 'session.update', vad_max_speech_ms: 1500, vad_target_speech_ms: 1500, vad_smart_split_window_ms: 0, vad_silence_ms: 2000 });
    await c.next('session.updated');
    await c.stream(Buffer.concat([readPcm('librivox-austen-0870.wav'), silence(2500)]));
    await c.waitFor((evs) => evs.filter((e) => e.type === COMPLETED).length >= 3 && !evs.some((e, i) => e.type === 'input_audio_buffer.speech_started' && !evs.slice(i).some((x) => x.type === COMPLETED && x.utterance_index === e.utterance_index)));
    const stops = c.of('input_audio_buffer.speech_stopped');
    const maxed = stops.filter((s) => s.reason === 'max_duration');
    expect(maxed.length).to.be.greaterThan(0);
    for (const s of maxed) {
      expect(s.audio_end_ms - s.audio_start_ms).to.be.at.most(1550);
      const nextStart = c.of('input_audio_buffer.speech_started').find((e) => e.utterance_index === s.utterance_index + 1);
      expect(nextStart, 'next segment starts at once').to.exist;
      expect(nextStart!.audio_start_ms).to.equal(s.audio_end_ms);
    }
    c.ws.close(1000);
  });

  it('closes 1013 client_backpressure when the client stops reading', async () => {
    const { c } = await open();
    (c.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const junk = JSON.stringify({ type: 'x'.repeat(64) });
    const sid = c.events[0].session_id;
    const alive = () => [...ctx.rt.sessions].some((s) => s.sessionId === sid);
    // Flood until the server gives up on us (every junk message answers with an error event we never read).
    for (let round = 0; round < 40 && alive(); round++) {
      for (let i = 0; i < 20_000; i++) c.ws.send(junk);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(alive(), 'server closed the session').to.equal(false);
    (c.ws as unknown as { _socket: { resume(): void } })._socket.resume();
    const res = await c.closed;
    expect(res).to.deep.equal({ code: 1013, reason: 'client_backpressure' });
  });
});

describe('realtime upstream backpressure', function () {
  this.timeout(30_000);
  let ctx: RealtimeTestContext;
  const engine = new ScriptedEngine();
  before(async () => {
    engine.delayMs = 3000;
    ctx = await createRealtimeContext({
      engine,
      env: { REALTIME_UPSTREAM_SOFT_BYTES: '40000', REALTIME_UPSTREAM_HARD_BYTES: '100000' },
    });
  });
  after(async () => ctx?.close());

  async function manual(): Promise<Client> {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    c.send({ type: 'session.update', vad: false });
    await c.next('session.updated');
    return c;
  }

  it('above the soft limit in flight drops frames with service.throttled (upstream_backpressure)', async () => {
    const c = await manual();
    await c.stream(AUSTEN.subarray(0, 48000));
    c.send({ type: 'flush' });
    await c.next('input_audio_buffer.speech_stopped');
    await c.stream(AUSTEN.subarray(0, 3200));
    const th = await c.next('service.throttled');
    expect(th.reason).to.equal('upstream_backpressure');
    expect(th.in_flight_bytes).to.equal(48000);
    // Nothing is lost silently: the utterance in flight still completes.
    await c.next(COMPLETED, 10_000);
    c.ws.close(1000);
  });

  it('above the hard limit closes 1013 upstream_backpressure', async () => {
    const c = await manual();
    await c.stream(AUSTEN.subarray(0, 32000));
    c.send({ type: 'flush' });
    await c.next('input_audio_buffer.speech_stopped');
    await c.stream(AUSTEN.subarray(0, 80000));
    c.send({ type: 'flush' });
    expect(await c.closed).to.deep.equal({ code: 1013, reason: 'upstream_backpressure' });
    // Both utterances were reported before the close.
    expect(c.of(COMPLETED).length).to.equal(c.of('input_audio_buffer.speech_stopped').length);
  });
});

describe('realtime shutdown', function () {
  this.timeout(30_000);
  it('closes sessions 1001 going_away, reports utterances in flight, meters usage and frees leases', async () => {
    const engine = new ScriptedEngine();
    engine.delayMs = 5000;
    const ctx = await createRealtimeContext({ engine });
    try {
      const { key, id } = await ctx.issueKey('pro');
      const c = await connect(ctx.url, bearer(key));
      const created = await c.next('session.created');
      c.send({ type: 'session.update', vad: false });
      await c.next('session.updated');
      await c.stream(AUSTEN.subarray(0, 32000));
      c.send({ type: 'flush' });
      await c.next('input_audio_buffer.speech_stopped');
      const stopping = ctx.rt.stop();
      expect(await c.closed).to.deep.equal({ code: 1001, reason: 'going_away' });
      await stopping;
      const done = c.of(COMPLETED);
      expect(done).to.have.length(1);
      expect(done[0].error.code).to.equal('transcription_failed');
      const rows = await usageRows(ctx, created.session_id);
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
      expect(await ctx.limits.countLeases('realtime_connections', id)).to.equal(0);
    } finally {
      await ctx.close(); // stop() is idempotent
    }
  });
});
