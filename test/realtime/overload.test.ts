/**
 * Overload degrades, never collapses: an instance at its session or queued
 * utterance limit refuses new sessions early (503 upstream_unavailable with
 * Retry-After) while open sessions keep their utterances; an utterance that
 * waits past its timeout fails alone, without opening the breaker; and a
 * handshake refused for want of a slot spends no handshake point.
 * Real server, real PocketSphinx (one decoder thread).
 */
import path from 'node:path';
import { expect } from 'chai';
import { runK6Script } from '../load/k6/node-runner.js';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import {
  bearer,
  connect,
  createRealtimeContext,
  readPcm,
  refused,
  repoRoot,
  silence,
  type RealtimeTestContext,
} from './helpers.js';

describe('realtime overload admission', function () {
  this.timeout(90_000);
  let engine: BuiltinEngine;
  let ctx: RealtimeTestContext | undefined;
  const speech = Buffer.concat([readPcm('jfk.wav'), silence(1000)]);

  before(async () => {
    // Generous decode limits: admission is tested here, not decode speed (CI machines are shared).
    engine = new BuiltinEngine(
      loadConfig({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '60000' }).speech.builtin,
      createLogger({ level: 'warn' }),
    );
    await engine.ready();
  });
  afterEach(async () => {
    await ctx?.close();
    ctx = undefined;
  });
  after(async () => {
    await engine?.close();
  });

  it('at REALTIME_MAX_SESSIONS new sessions get 503 with Retry-After; the open one keeps transcribing', async () => {
    ctx = await createRealtimeContext({
      engine,
      env: { REALTIME_MAX_SESSIONS: '1' },
      overrides: { realtime: { overload: { retryAfterSeconds: 3 } } },
    });
    const { key } = await ctx.issueKey('pro');
    const a = await connect(ctx.url, bearer(key));
    await a.next('session.created');
    const r = await refused(ctx.url, bearer(key).headers);
    expect(r.status).to.equal(503);
    expect(r.headers['retry-after']).to.equal('3');
    expect(r.body.error.code).to.equal('upstream_unavailable');
    await a.stream(speech, { pace: 0 });
    const done = await a.next('conversation.item.input_audio_transcription.completed', 55_000);
    expect(done.error ?? null).to.equal(null);
    expect(done.text).to.match(/\w/);
    a.ws.close(1000);
    await a.closed;
    // The slot is free again.
    await eventuallyAccepted(ctx.url, key);
  });

  it('while REALTIME_MAX_QUEUED_UTTERANCES wait for the engine, new sessions are refused; afterwards accepted', async () => {
    ctx = await createRealtimeContext({ engine, env: { REALTIME_MAX_QUEUED_UTTERANCES: '1' } });
    const { key } = await ctx.issueKey('pro');
    const a = await connect(ctx.url, bearer(key));
    await a.next('session.created');
    await a.stream(speech, { pace: 0 });
    await a.next('input_audio_buffer.speech_stopped', 20_000);
    // 11 s of speech takes the engine well over a second: the utterance is queued now.
    if (a.of('conversation.item.input_audio_transcription.completed').length === 0) {
      const r = await refused(ctx.url, bearer(key).headers);
      expect(r.status).to.equal(503);
      expect(r.headers['retry-after']).to.match(/^\d+$/);
    }
    // Every utterance the VAD cut gets its transcript (none fails), and then there is room again.
    await a.waitFor(
      (evs) =>
        evs.filter((e) => e.type === 'conversation.item.input_audio_transcription.completed').length ===
        evs.filter((e) => e.type === 'input_audio_buffer.speech_stopped').length,
      60_000,
    );
    expect(
      a.of('conversation.item.input_audio_transcription.completed').filter((e) => e.error),
    ).to.deep.equal([]);
    await eventuallyAccepted(ctx.url, key);
    a.ws.close(1000);
  });

  it('an utterance that times out waiting fails alone: the session stays open and the breaker closed', async () => {
    ctx = await createRealtimeContext({
      engine,
      // 1 ms (below the setting's floor, so an override): no final can come back from a decoder thread
      // that fast. With 100 ms, decoders that kept up (loaded before the first session) answered in time.
      overrides: { realtime: { transcribeTimeoutMs: 1, breaker: { failureThreshold: 1 } } },
    });
    const { key } = await ctx.issueKey('pro');
    const a = await connect(ctx.url, bearer(key));
    await a.next('session.created');
    await a.stream(speech, { pace: 0 });
    const done = await a.next('conversation.item.input_audio_transcription.completed', 30_000);
    expect(done.error, 'the utterance failed').to.be.an('object');
    expect(ctx.rt.breaker.state).to.equal('closed');
    // Still open: the session answers an update.
    a.send({ type: 'session.update', session: { language: 'en' } });
    await a.next('session.updated', 5000);
    a.ws.close(1000);
    const closed = await a.closed;
    expect(closed.code).to.equal(1000);
  });

  it('an engine that falls behind (its own decode limit passes) fails utterances alone and never opens the breaker', async () => {
    // A built-in engine whose decode limit every decode overruns: what busy cores look like to it.
    const behind = new BuiltinEngine(
      loadConfig(
        { STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '1' },
        { speech: { builtin: { timeoutPerAudioSecondMs: 0 } } },
      ).speech.builtin,
      createLogger({ level: 'warn' }),
    );
    await behind.ready();
    try {
      ctx = await createRealtimeContext({
        engine: behind,
        overrides: { realtime: { breaker: { failureThreshold: 1 } } },
      });
      const { key } = await ctx.issueKey('pro');
      const a = await connect(ctx.url, bearer(key));
      await a.next('session.created');
      await a.stream(speech, { pace: 0 });
      await a.stream(speech, { pace: 0 });
      await a.waitFor(
        (evs) =>
          evs.filter((e) => e.type === 'input_audio_buffer.speech_stopped').length >= 2 &&
          evs.filter((e) => e.type === 'conversation.item.input_audio_transcription.completed').length ===
            evs.filter((e) => e.type === 'input_audio_buffer.speech_stopped').length,
        30_000,
      );
      const done = a.of('conversation.item.input_audio_transcription.completed');
      expect(
        done.every((e) => e.error),
        'every utterance failed: the engine was behind',
      ).to.equal(true);
      expect(ctx.rt.breaker.state).to.equal('closed');
      a.send({ type: 'session.update', session: { language: 'en' } });
      await a.next('session.updated', 5000);
      const other = await eventuallyAccepted(ctx.url, key);
      other.ws.close(1000);
      a.ws.close(1000);
      expect((await a.closed).code).to.equal(1000);
    } finally {
      await ctx?.close();
      ctx = undefined;
      await behind.close();
    }
  });

  it('the k6 script: a refused VU backs off (Retry-After, doubling) and retries; refusals and closes are metrics', async () => {
    ctx = await createRealtimeContext({ engine, env: { REALTIME_MAX_SESSIONS: '1' } });
    const { key } = await ctx.issueKey('pro');
    const result = await runK6Script(path.join(repoRoot, 'test/load/k6/realtime.js'), {
      URL: ctx.url,
      KEY: key,
      VUS: '2',
      DURATION_S: '6',
      RETRY_AFTER_S: '1',
    });
    // One VU holds the only session for the whole run; the other is refused, backs off (1 s, 2 s, ...) and retries.
    expect(result.metrics.rt_refused_connects.count).to.be.within(2, 4);
    expect(result.metrics.rt_connect_ms.count).to.equal(1 + (result.metrics.rt_early_closes?.count ?? 0));
    expect(result.metrics.rt_close_1013?.count ?? 0).to.equal(0);
    expect(result.metrics.rt_close_1000.count).to.equal(1);
    expect(result.metrics.rt_failed_utterances?.count ?? 0).to.equal(0);
  });

  it('a handshake refused for want of a slot spends no handshake point (free: 6 a minute)', async () => {
    ctx = await createRealtimeContext({ engine, redis: true });
    const { key } = await ctx.issueKey('free');
    const first = await connect(ctx.url, bearer(key));
    await first.next('session.created');
    for (let i = 0; i < 8; i++) {
      const r = await refused(ctx.url, bearer(key).headers);
      expect(r.body.error.code).to.equal('too_many_connections');
    }
    first.ws.close(1000);
    await first.closed;
    // Five more handshakes fit in the minute: the eight refusals counted nothing.
    for (let i = 0; i < 5; i++) {
      const c = await eventuallyAccepted(ctx.url, key);
      c.ws.close(1000);
      await c.closed;
    }
    const r = await refused(ctx.url, bearer(key).headers);
    expect(r.body.error.code).to.equal('connection_rate_exceeded');
  });
});

/** Connects once the previous session's slot has been released (release is asynchronous). */
async function eventuallyAccepted(url: string, key: string) {
  const deadline = Date.now() + 5000;
  for (;;) {
    try {
      const c = await connect(url, bearer(key));
      await c.next('session.created');
      return c;
    } catch (err) {
      const status = (err as { status?: number }).status;
      if (Date.now() > deadline || (status !== 429 && status !== 503)) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
