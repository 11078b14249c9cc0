/**
 * Realtime protocol against a real uWS server and a real `ws` client, with a
 * real engine/ worker process (PocketSphinx) behind the remote pool. Faults
 * are real: the worker stopped (SIGSTOP) while utterances are in flight, its
 * connections refused. What the tier sent upstream is read from the requests
 * that reached the worker (upstream.ts).
 */
import { expect } from 'chai';
import {
  createRealtimeContext,
  connect,
  bearer,
  readPcm,
  silence,
  eventually,
  audioReceived,
  usageRows,
  finalUsage,
  type RealtimeTestContext,
  type Client,
} from './helpers.js';
import { startSpeechUpstream, type SpeechUpstream } from './upstream.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const AUSTEN = readPcm('librivox-austen-0880.wav');

/** Upstream requests reach the worker asynchronously: waits until `n` transcriptions have. */
const transcriptionsReach = (upstream: SpeechUpstream, n: number) =>
  eventually(
    async () => upstream.transcriptions().length,
    (k) => k >= n,
    10_000,
  );

describe('realtime protocol, real engine worker', function () {
  this.timeout(60_000);
  let upstream: SpeechUpstream;
  before(async () => {
    upstream = await startSpeechUpstream({ threads: 2 });
  });
  after(async () => upstream?.close());

  describe('realtime protocol', function () {
    let ctx: RealtimeTestContext;

    before(async () => {
      ctx = await createRealtimeContext({
        engine: upstream.engine,
        env: {
          PLANS_JSON: JSON.stringify({
            tiny: {
              maxConcurrentConnections: 5,
              maxSessionSeconds: 2,
              idleTimeoutSeconds: 1,
              maxAudioSecondsPerSession: 900,
            },
            short: { maxConcurrentConnections: 5, maxAudioSecondsPerSession: 3 },
            window: { maxConcurrentConnections: 5, maxAudioSecondsPerWindow: 20 },
            one: { maxConcurrentConnections: 5, maxConcurrentUtterances: 1 },
          }),
        },
        overrides: { realtime: { tickMs: 100 } },
      });
    });
    after(async () => ctx?.close());

    async function open(plan = 'pro'): Promise<{ c: Client; keyId: string }> {
      const { key, id } = await ctx.issueKey(plan);
      const c = await connect(ctx.url, bearer(key));
      await c.next('session.created');
      return { c, keyId: id };
    }

    it('sends session.created at once with every field of 2.7, remaining audio from real usage (what the session may use)', async () => {
      const { key, id } = await ctx.issueKey('free');
      await ctx
        .db('usage_events')
        .insert({ key_id: id, plane: 'segment', ref_id: 'seed-' + id, audio_seconds: 100 });
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
        // The window has 3,500 s left; a free session may use at most 900 of them.
        remaining_audio_seconds: 900,
      });
      c.ws.close(1000);
      await c.closed;
    });

    it('streams speech: started < stopped < completed per utterance, unique increasing indexes, durations', async () => {
      const { c } = await open();
      // Two utterances a pause apart (4.5 s of speech: every utterance is really decoded).
      await c.stream(Buffer.concat([AUSTEN, silence(1200), AUSTEN.subarray(0, 48000), silence(1200)]));
      await c.waitFor((evs) => {
        const stopped = evs.filter((e) => e.type === 'input_audio_buffer.speech_stopped').length;
        return stopped >= 2 && evs.filter((e) => e.type === COMPLETED).length === stopped;
      }, 50_000);
      // Indexes increment per segment (0, 1, 2, ... in the order speech starts). Segments overlap
      // in the engine (two decoders), so completions may arrive in another order (interface 6.1):
      // each index is completed exactly once.
      const idx = c.of('input_audio_buffer.speech_started').map((e) => e.utterance_index);
      expect(idx).to.deep.equal(idx.map((_, k) => k));
      const completed = c.of(COMPLETED).map((e) => e.utterance_index);
      expect([...completed].sort((a, b) => a - b)).to.deep.equal(idx);
      for (const i of idx) {
        const pos = (t: string) => c.events.findIndex((e) => e.type === t && e.utterance_index === i);
        expect(pos('input_audio_buffer.speech_started')).to.be.lessThan(
          pos('input_audio_buffer.speech_stopped'),
        );
        expect(pos('input_audio_buffer.speech_stopped')).to.be.lessThan(pos(COMPLETED));
        const done = c.events[pos(COMPLETED)];
        expect(done.error).to.equal(undefined);
        expect(done.text).to.be.a('string').and.not.empty;
        expect(done.language).to.equal('en');
        expect(done.audio_duration_ms).to.be.greaterThan(250);
        expect(done.speech_duration_ms).to.be.at.most(done.audio_duration_ms);
        expect(done.latency_ms).to.be.a('number').and.at.least(0);
      }
      expect(c.of('input_audio_buffer.speech_stopped').every((e) => e.reason === 'end_of_speech')).to.equal(
        true,
      );
      c.ws.close(1000);
      const closed = await c.closed;
      expect(closed.code).to.equal(1000);
    });

    it('hears a quiet phrase without a streaming decoder: jfk.wav gives its four phrases after any lead-in', async () => {
      // The scaled deployment's path: whole utterances to the worker, no sentence-end check. "ask not"
      // (about 3.3-4.3 s) is spoken softly: it must still be an utterance of its own. (With the default
      // 300 ms window the pause inside it may end the utterance before "not": docs/decisions/realtime.md.)
      const JFK = readPcm('jfk.wav');
      const runs = await Promise.all(
        [0, 300, 800].map(async (lead) => {
          const { c } = await open();
          await c.stream(Buffer.concat([silence(lead), JFK, silence(1200)]), { pace: 2 });
          await c.waitFor((evs) => evs.filter((e) => e.type === COMPLETED).length >= 4, 50_000);
          c.ws.close(1000);
          await c.closed;
          return { lead, c };
        }),
      );
      for (const { lead, c } of runs) {
        const starts = c.of('input_audio_buffer.speech_started').map((e) => (e.audio_start_ms - lead) / 1000);
        const texts = c
          .of(COMPLETED)
          .sort((a, b) => a.utterance_index - b.utterance_index)
          .map((e) => e.text);
        const what = `lead-in ${lead} ms: ${texts.join(' | ')}; starts ${starts.join(', ')}`;
        expect(starts, what).to.have.length(4);
        expect(starts[1], what).to.be.within(2.7, 3.6);
        expect(texts[1], what).to.match(/\w/);
      }
    });

    it('accepts base64 appends and both flush spellings', async () => {
      const { c } = await open();
      const half = AUSTEN.subarray(0, 32000 * 2); // 2 s of speech, no trailing silence
      for (let off = 0; off < half.length; off += 3200) {
        c.send({
          type: 'input_audio_buffer.append',
          audio: half.subarray(off, off + 3200).toString('base64'),
        });
      }
      c.send({ type: 'input_audio_buffer.flush' });
      const stopped = await c.next('input_audio_buffer.speech_stopped');
      expect(stopped.reason).to.equal('flush');
      expect((await c.next(COMPLETED, 30_000)).text).to.not.be.empty;
      const from = c.events.length;
      await c.stream(AUSTEN.subarray(0, 32000));
      c.send({ type: 'flush' });
      await c.waitFor((evs) => evs.slice(from).some((e) => e.type === COMPLETED), 30_000);
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
      expect(up.session_id)
        .to.match(/^sess_/)
        .and.not.equal('sess_hijack');
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
      expect(up.ignored_fields).to.include.members([
        'session_id',
        'request_id',
        'user_id',
        'sample_rate',
        'audio',
        'something',
      ]);
      for (const [lang, want] of [
        ['mandarin', 'zh'],
        ['zh-tw', 'zh'],
        ['AUTO', 'auto'],
        ['en-US', 'en'],
      ]) {
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
      // 2000 characters that take two UTF-16 units each are still 2000 characters.
      const emoji = '\u{1F3A4}'.repeat(2000);
      const from2 = c.events.length;
      c.send({ type: 'session.update', prompt: emoji });
      expect((await c.next('session.updated', 5000, from2)).session.prompt).to.equal(emoji);
      await bad({ prompt: '\u{1F3A4}'.repeat(2001) });
      // Names the interface does not list are stripped, including a camelCase translateTo and
      // Object.prototype's own names.
      const from3 = c.events.length;
      c.send({ type: 'session.update', translateTo: 'fr', constructor: 1, toString: 'x', hasOwnProperty: 2 });
      const stripped = await c.next('session.updated', 5000, from3);
      expect(stripped.session.translate_to).to.equal('en');
      expect(stripped.ignored_fields).to.include.members([
        'translateTo',
        'constructor',
        'toString',
        'hasOwnProperty',
      ]);
      expect(stripped.session).to.not.have.property('undefined');
      // Top-level and nested `session` options together: both apply (nested wins on a clash).
      const from4 = c.events.length;
      c.send({
        type: 'session.update',
        language: 'fr',
        prompt: 'top',
        session: { prompt: 'nested', vad: false },
      });
      const both = await c.next('session.updated', 5000, from4);
      expect(both.session).to.include({ language: 'fr', prompt: 'nested', vad: false });
      expect(both.ignored_fields).to.not.include('session');
      // A shorter maximum segment shrinks a smart-split window the client did not set; one it sets must fit.
      const from5 = c.events.length;
      c.send({ type: 'session.update', vad_max_speech_ms: 1000 });
      const short = await c.next('session.updated', 5000, from5);
      expect(short.session).to.include({ vad_max_speech_ms: 1000, vad_smart_split_window_ms: 500 });
      await bad({ vad_max_speech_ms: 1500, vad_smart_split_window_ms: 1500 });
      c.ws.close(1000);
    });

    it('a language change applies to new utterances only; the engine gets language and prompt', async () => {
      const { c } = await open();
      const sent = upstream.transcriptions().length;
      c.send({ type: 'session.update', language: 'en', prompt: 'kennedy' });
      await c.next('session.updated');
      // The worker is stopped, so the first utterance is still in flight when the language changes.
      await upstream.whilePaused(async () => {
        await c.stream(AUSTEN.subarray(0, 32000));
        c.send({ type: 'flush' });
        await c.next('input_audio_buffer.speech_stopped');
        await transcriptionsReach(upstream, sent + 1);
        const from = c.events.length;
        c.send({ type: 'session.update', language: 'french' });
        await c.next('session.updated', 5000, from);
        await c.stream(AUSTEN.subarray(0, 32000));
        c.send({ type: 'flush' });
        await transcriptionsReach(upstream, sent + 2);
        // Back to English before the French utterance is answered: its event still says fr.
        const again = c.events.length;
        c.send({ type: 'session.update', language: 'en' });
        await c.next('session.updated', 5000, again);
      });
      await c.waitFor((evs) => evs.filter((e) => e.type === COMPLETED).length === 2, 30_000);
      const requests = upstream.transcriptions().slice(sent);
      expect(requests.map((r) => r.fields.language)).to.deep.equal(['en', 'fr']);
      expect(requests.map((r) => r.fields.prompt)).to.deep.equal(['kennedy', 'kennedy']);
      const done = c.of(COMPLETED).sort((a, b) => a.utterance_index - b.utterance_index);
      expect(done.map((e) => e.language)).to.deep.equal(['en', 'fr']);
      expect(done[0].error).to.equal(undefined);
      expect(done[0].text).to.not.be.empty;
      // The built-in worker knows English only: it refuses the French utterance, and the client is told why.
      expect(done[1].error.code).to.equal('transcription_failed');
      const refusal = c.of('error').find((e) => e.utterance_index === done[1].utterance_index);
      expect(refusal).to.include({ code: 'transcription_failed', upstream_code: 'unsupported_language' });
      c.ws.close(1000);
    });

    it('a language change while an utterance is open applies from the next utterance, not to that one', async () => {
      const { c } = await open();
      c.send({ type: 'session.update', language: 'en', prompt: 'first' });
      await c.next('session.updated');
      const sent = upstream.transcriptions().length;
      await c.stream(AUSTEN.subarray(0, 32000)); // speech, no flush: the utterance stays open
      await c.next('input_audio_buffer.speech_started');
      const from = c.events.length;
      c.send({ type: 'session.update', language: 'french', prompt: 'second' });
      await c.next('session.updated', 5000, from);
      c.send({ type: 'flush' });
      const done = await c.next(COMPLETED, 30_000);
      expect(done.language).to.equal('en');
      expect(done.error).to.equal(undefined);
      const [req] = upstream.transcriptions().slice(sent);
      expect(req.fields).to.include({ language: 'en', prompt: 'first' });
      c.ws.close(1000);
    });

    it('an utterance open when the server closes abruptly still gets speech_stopped and a failed completed', async () => {
      const { c } = await open();
      await c.stream(AUSTEN.subarray(0, 32000));
      const started = await c.next('input_audio_buffer.speech_started');
      c.ws.send(Buffer.alloc(1024 * 1024 + 2)); // 1009 audio_frame_too_large
      expect(await c.closed).to.deep.equal({ code: 1009, reason: 'audio_frame_too_large' });
      const stopped = c.of('input_audio_buffer.speech_stopped');
      expect(stopped).to.have.length(1);
      expect(stopped[0]).to.include({ utterance_index: started.utterance_index, reason: 'session_closed' });
      const done = c.of(COMPLETED);
      expect(done).to.have.length(1);
      expect(done[0]).to.include({ utterance_index: started.utterance_index, text: '' });
      expect(done[0].error.code).to.equal('transcription_failed');
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
      cases[5] = [
        { type: 'input_audio_buffer.append', audio: Buffer.from([1, 2, 3]).toString('base64') },
        'invalid_audio',
      ];
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
      // Well above the limit (up to the 8 MiB transport cap): the same error and 1009, not a dropped connection.
      for (const size of [2 * 1024 * 1024, 6 * 1024 * 1024]) {
        const { c: big } = await open();
        big.ws.send(Buffer.alloc(size));
        expect((await big.next('error')).code).to.equal('audio_frame_too_large');
        expect(await big.closed).to.deep.equal({ code: 1009, reason: 'audio_frame_too_large' });
      }
      // A text frame other than audio above 1 MiB: the same error and 1009.
      const { c: text } = await open();
      text.send({ type: 'session.update', prompt: 'p', padding: 'x'.repeat(2 * 1024 * 1024) });
      expect((await text.next('error')).code).to.equal('audio_frame_too_large');
      expect(await text.closed).to.deep.equal({ code: 1009, reason: 'audio_frame_too_large' });
      // An append carrying a whole 1 MiB frame is larger than 1 MiB as text, and accepted.
      const { c: b64 } = await open();
      b64.send({ type: 'input_audio_buffer.append', audio: Buffer.alloc(1024 * 1024).toString('base64') });
      b64.send({ type: 'session.update' });
      await b64.next('session.updated');
      expect(b64.of('error')).to.deep.equal([]);
      b64.ws.close(1000);
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
      const rows = await finalUsage(ctx, sid);
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.within(2.9, 3.1);
    });

    it('closes 1008 audio_quota_exhausted when the window budget runs out (and at once when none is left)', async () => {
      const { key, id } = await ctx.issueKey('window');
      await ctx
        .db('usage_events')
        .insert({ key_id: id, plane: 'segment', ref_id: 'seed-w-' + id, audio_seconds: 18 });
      const c = await connect(ctx.url, bearer(key));
      const created = await c.next('session.created');
      expect(created.limits.remaining_audio_seconds).to.equal(2);
      await c.stream(AUSTEN);
      expect(await c.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
      await finalUsage(ctx, created.session_id);
      const c2 = await connect(ctx.url, bearer(key));
      const created2 = await c2.next('session.created');
      expect(created2.limits.remaining_audio_seconds).to.equal(0);
      expect(await c2.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
    });

    it('meters usage exactly once at a normal close', async () => {
      const { c } = await open();
      const sid = c.events[0].session_id;
      await c.stream(AUSTEN.subarray(0, 64000)); // 2 s
      await audioReceived(ctx, sid, 2);
      c.ws.close(1000);
      await c.closed;
      const rows = await finalUsage(ctx, sid);
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.closeTo(2, 0.01);
    });

    it('meters usage when the client vanishes without a close frame', async () => {
      const { c } = await open();
      const sid = c.events[0].session_id;
      await c.stream(AUSTEN.subarray(0, 32000)); // 1 s
      await audioReceived(ctx, sid, 1);
      c.ws.terminate();
      const rows = await finalUsage(ctx, sid);
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
    });

    it('a text frame that is not UTF-8 ends the connection (uWS, 1006), still metered, slot freed', async () => {
      const { c } = await open();
      const sid = c.events[0].session_id;
      await c.stream(AUSTEN.subarray(0, 32000)); // 1 s
      await audioReceived(ctx, sid, 1);
      c.ws.send(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), { binary: false });
      expect((await c.closed).code).to.equal(1006);
      const rows = await finalUsage(ctx, sid);
      expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
      expect([...ctx.rt.sessions].some((s) => s.sessionId === sid)).to.equal(false);
    });

    it('drops frames with service.throttled beyond max_concurrent_utterances', async () => {
      const { c } = await open('one');
      c.send({ type: 'session.update', vad: false });
      await c.next('session.updated');
      const sent = upstream.transcriptions().length;
      await upstream.whilePaused(async () => {
        await c.stream(AUSTEN.subarray(0, 16000));
        c.send({ type: 'flush' });
        await c.next('input_audio_buffer.speech_stopped');
        await c.stream(AUSTEN.subarray(0, 16000));
        const th = await c.next('service.throttled');
        expect(th.reason).to.equal('max_concurrent_utterances');
        expect(th.dropped_bytes).to.be.greaterThan(0);
      });
      await c.next(COMPLETED, 30_000);
      // The dropped audio never became an utterance: one transcription reached the worker.
      expect(upstream.transcriptions().length - sent).to.equal(1);
      expect(c.of('input_audio_buffer.speech_started')).to.have.length(1);
      c.ws.close(1000);
    });

    it('holds max_concurrent_utterances when several utterances start and stop within one frame (VAD on)', async () => {
      const { c } = await open('one');
      const sent = upstream.transcriptions().length;
      const speech = AUSTEN.subarray(0, 48000); // 1.5 s
      const frame = Buffer.concat([speech, silence(1200), speech, silence(1200), speech, silence(1200)]);
      await upstream.whilePaused(async () => {
        c.ws.send(frame); // three utterances in one frame, the worker answers none of them yet
        const th = await c.next('service.throttled', 10_000);
        expect(th).to.include({ reason: 'max_concurrent_utterances', max_concurrent_utterances: 1 });
        expect(th.dropped_bytes).to.be.greaterThan(0);
        // The first utterance reaches the worker (however slowly, on a loaded machine)...
        await eventually(
          async () => upstream.transcriptions().length - sent,
          (n) => n >= 1,
          20_000,
        );
        // ...and no other follows it while that one is unanswered.
        await new Promise((r) => setTimeout(r, 300));
        expect(upstream.transcriptions().length - sent).to.equal(1);
      });
      await c.next(COMPLETED, 30_000);
      // Only the utterance within the bound was announced and transcribed; indexes stay contiguous.
      expect(c.of('input_audio_buffer.speech_started').map((e) => e.utterance_index)).to.deep.equal([0]);
      expect(c.of(COMPLETED)).to.have.length(1);
      const sid = c.events[0].session_id;
      c.ws.close(1000);
      // The audio of the two dropped utterances (1.5 s of speech each, at least) is not billed.
      const rows = await finalUsage(ctx, sid);
      const sentSeconds = frame.length / 32000;
      expect(Number(rows[0].audio_seconds))
        .to.be.below(sentSeconds - 3)
        .and.above(1.5);
    });

    it('a failed transcription yields an error event and a completed event with empty text and error', async () => {
      const { c } = await open();
      // The worker cannot be reached: every connection to it is reset.
      upstream.refuse = true;
      try {
        await c.stream(AUSTEN.subarray(0, 32000));
        c.send({ type: 'flush' });
        const err = await c.next('error');
        expect(err).to.include({ code: 'transcription_failed', utterance_index: 0 });
        const done = await c.next(COMPLETED);
        expect(done.text).to.equal('');
        expect(done.error.code).to.equal('transcription_failed');
      } finally {
        upstream.refuse = false;
      }
      c.ws.close(1000);
    });

    it('vadMaxSpeechMs splits continuous speech (max_duration) and the next segment starts at once', async () => {
      const { c } = await open();
      c.send({
        type: 'session.update',
        vad_max_speech_ms: 1500,
        vad_target_speech_ms: 1500,
        vad_smart_split_window_ms: 0,
        vad_silence_ms: 2000,
      });
      await c.next('session.updated');
      await c.stream(Buffer.concat([readPcm('librivox-austen-0890.wav'), silence(2500)]));
      // Every utterance's final (held events of later ones come right after a cut one's completed).
      await c.finals(50_000);
      expect(c.of(COMPLETED).length).to.be.at.least(3);
      const stops = c.of('input_audio_buffer.speech_stopped');
      const maxed = stops.filter((s) => s.reason === 'max_duration');
      expect(maxed.length).to.be.greaterThan(0);
      for (const s of maxed) {
        expect(s.audio_end_ms - s.audio_start_ms).to.be.at.most(1550);
        const nextStart = c
          .of('input_audio_buffer.speech_started')
          .find((e) => e.utterance_index === s.utterance_index + 1);
        expect(nextStart, 'next segment starts at once').to.exist;
        expect(nextStart!.audio_start_ms).to.equal(s.audio_end_ms);
      }
      // Interface 3.3: stopped and completed events for the old segment, then speech_started for the
      // new one (before, the new one's speech_started came between the old one's stopped and completed).
      const order = c.events
        .filter((e) => typeof e.utterance_index === 'number')
        .map((e) => `${e.type.split('.').pop()} ${e.utterance_index}`);
      for (const s of [...maxed, ...stops.filter((x) => x.reason === 'target_duration')]) {
        const i = s.utterance_index;
        const at = (what: string) => order.indexOf(`${what} ${i}`);
        expect(at('completed'), order.join(', ')).to.be.greaterThan(at('speech_stopped'));
        if (order.includes(`speech_started ${i + 1}`))
          expect(order.indexOf(`speech_started ${i + 1}`), order.join(', ')).to.be.greaterThan(
            at('completed'),
          );
        // Nothing of the new segment comes between the old one's stopped and completed.
        expect(
          order.slice(at('speech_stopped'), at('completed')).filter((x) => !x.endsWith(` ${i}`)),
        ).to.deep.equal([]);
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
      // Bounded by time, not rounds: a loaded machine drains each round more slowly.
      const until = Date.now() + 30_000;
      while (alive() && Date.now() < until) {
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
    let ctx: RealtimeTestContext;
    before(async () => {
      ctx = await createRealtimeContext({
        engine: upstream.engine,
        overrides: { realtime: { upstreamSoftBytes: 40_000, upstreamHardBytes: 100_000 } },
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
      await upstream.whilePaused(async () => {
        await c.stream(AUSTEN.subarray(0, 48000));
        c.send({ type: 'flush' });
        await c.next('input_audio_buffer.speech_stopped');
        await c.stream(AUSTEN.subarray(0, 3200));
        const th = await c.next('service.throttled');
        expect(th.reason).to.equal('upstream_backpressure');
        expect(th.in_flight_bytes).to.equal(48000);
      });
      // Nothing is lost silently: the utterance in flight still completes.
      const done = await c.next(COMPLETED, 30_000);
      expect(done.error).to.equal(undefined);
      expect(done.text).to.not.be.empty;
      c.ws.close(1000);
    });

    it('above the hard limit closes 1013 upstream_backpressure', async () => {
      const c = await manual();
      await upstream.whilePaused(async () => {
        await c.stream(AUSTEN.subarray(0, 32000));
        c.send({ type: 'flush' });
        await c.next('input_audio_buffer.speech_stopped');
        await c.stream(AUSTEN.subarray(0, 80000));
        c.send({ type: 'flush' });
        expect(await c.closed).to.deep.equal({ code: 1013, reason: 'upstream_backpressure' });
      });
      // Both utterances were reported before the close.
      expect(c.of(COMPLETED).length).to.equal(c.of('input_audio_buffer.speech_stopped').length);
    });
  });

  describe('realtime shutdown', function () {
    let testDb: TestDatabase;
    before(async () => {
      testDb = await createTestDatabase('stt_rt_stop');
    });
    after(async () => testDb?.drop());

    /** An instance with one session (VAD off) that has streamed 1 s of speech. */
    async function sessionWithSpeech(env: Record<string, string> = {}) {
      const ctx = await createRealtimeContext({ engine: upstream.engine, testDb, env });
      const { key, id } = await ctx.issueKey('pro');
      const c = await connect(ctx.url, bearer(key));
      const created = await c.next('session.created');
      c.send({ type: 'session.update', vad: false });
      await c.next('session.updated');
      await c.stream(AUSTEN.subarray(0, 32000));
      // Messages are handled in order: once this is answered, every frame has arrived.
      const from = c.events.length;
      c.send({ type: 'session.update' });
      await c.next('session.updated', 5000, from);
      return { ctx, c, keyId: id, sessionId: created.session_id as string };
    }

    async function expectBilledAndReleased(ctx: RealtimeTestContext, keyId: string, sessionId: string) {
      const rows = await usageRows(ctx, sessionId);
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
      expect(await ctx.limits.countLeases('realtime_connections', keyId)).to.equal(0);
    }

    it('drains: ends the open utterance, delivers its transcript, then closes 1001 going_away, meters usage and frees leases', async () => {
      const { ctx, c, keyId, sessionId } = await sessionWithSpeech();
      let stopping: Promise<void> | undefined;
      try {
        await upstream.whilePaused(async () => {
          stopping = ctx.rt.stop();
          const stopped = await c.next('input_audio_buffer.speech_stopped');
          expect(stopped.reason).to.equal('flush');
          await new Promise((r) => setTimeout(r, 300));
          expect(c.ws.readyState, 'the close waits for the transcript in flight').to.equal(c.ws.OPEN);
        });
        expect(await c.closed).to.deep.equal({ code: 1001, reason: 'going_away' });
        await stopping;
        const done = c.of(COMPLETED);
        expect(done).to.have.length(1);
        expect(done[0].error).to.equal(undefined);
        expect(done[0].text).to.not.be.empty;
        await expectBilledAndReleased(ctx, keyId, sessionId);
      } finally {
        await ctx.close(); // stop() is idempotent
      }
    });

    it('reports a transcript not back within REALTIME_CLOSE_DRAIN_MS as failed, then closes 1001', async () => {
      const { ctx, c, keyId, sessionId } = await sessionWithSpeech({ REALTIME_CLOSE_DRAIN_MS: '300' });
      try {
        await upstream.whilePaused(async () => {
          c.send({ type: 'flush' });
          await c.next('input_audio_buffer.speech_stopped');
          const stopping = ctx.rt.stop();
          expect(await c.closed).to.deep.equal({ code: 1001, reason: 'going_away' });
          await stopping;
        });
        const done = c.of(COMPLETED);
        expect(done).to.have.length(1);
        expect(done[0].error.code).to.equal('transcription_failed');
        await expectBilledAndReleased(ctx, keyId, sessionId);
      } finally {
        await ctx.close();
      }
    });
  });
});
