/**
 * `session.update` values that cannot become strings (`{"toString": null}`,
 * issue 36) closed a /v1/realtime session 1011 with an error-level stack.
 * Each is now an `error` event (invalid_session_update) and the session
 * goes on, on both endpoints and in both OpenAI forms.
 */
import { expect } from 'chai';
import { bearer, connect, createRealtimeContext, type RealtimeTestContext } from './helpers.js';
import { startSpeechUpstream, type SpeechUpstream } from './upstream.js';

const HOSTILE = { toString: null, valueOf: null };

describe('realtime: session.update values that cannot become strings', function () {
  this.timeout(60_000);
  let ctx: RealtimeTestContext;
  let upstream: SpeechUpstream;
  before(async () => {
    upstream = await startSpeechUpstream();
    ctx = await createRealtimeContext({ engine: upstream.engine });
  });
  after(async () => {
    await ctx?.close();
    await upstream?.close();
  });

  const input = (v: Record<string, unknown>) => ({
    type: 'session.update',
    session: { audio: { input: v } },
  });
  const GA: unknown[] = [
    input({ noise_reduction: { type: HOSTILE } }),
    input({ noise_reduction: HOSTILE }),
    input({ transcription: { model: HOSTILE } }),
    input({ transcription: { language: HOSTILE } }),
    input({ transcription: { prompt: HOSTILE } }),
    input({ turn_detection: { type: 'server_vad', threshold: HOSTILE, silence_duration_ms: HOSTILE } }),
    { type: 'session.update', session: { include: [HOSTILE] } },
    { type: 'session.update', session: { include: HOSTILE } },
    { type: 'session.update', session: { type: HOSTILE } },
    {
      type: 'session.update',
      session: { audio: { input: { format: { type: 'audio/pcm', rate: HOSTILE } } } },
    },
  ];
  const BETA: unknown[] = [
    { type: 'transcription_session.update', session: { input_audio_noise_reduction: { type: HOSTILE } } },
    { type: 'transcription_session.update', session: { input_audio_transcription: { model: HOSTILE } } },
    { type: 'transcription_session.update', session: { input_audio_format: HOSTILE } },
    { type: 'transcription_session.update', session: { include: [HOSTILE] } },
  ];

  async function expectRefusedEach(
    url: string,
    msgs: unknown[],
    created: string,
    updated: string,
    headers: Record<string, string>,
  ) {
    const c = await connect(url, { headers });
    await c.next(created);
    for (const msg of msgs) {
      const from = c.events.length;
      c.send(msg);
      await c.waitFor((evs) => evs.slice(from).some((e) => e.type === 'error'));
      const err = c.events.slice(from).find((e) => e.type === 'error')!;
      expect(err.error, JSON.stringify(msg)).to.include({ type: 'invalid_request_error' });
    }
    // The session is still there and takes a valid update.
    const from = c.events.length;
    c.send(
      created === 'session.created'
        ? input({ noise_reduction: { type: 'near_field' } })
        : { type: 'transcription_session.update', session: { include: [] } },
    );
    await c.waitFor((evs) => evs.slice(from).some((e) => e.type === updated));
    expect(c.ws.readyState, 'still open').to.equal(1);
    c.ws.close(1000);
  }

  it('/v1/realtime (GA and beta forms): an error event each, the session stays open, no error-level log', async () => {
    const { key } = await ctx.issueKey('pro');
    const base = `ws://127.0.0.1:${ctx.rt.port}/v1/realtime`;
    await expectRefusedEach(base, GA, 'session.created', 'session.updated', {
      authorization: `Bearer ${key}`,
    });
    await expectRefusedEach(
      `${base}?intent=transcription`,
      BETA,
      'transcription_session.created',
      'transcription_session.updated',
      { authorization: `Bearer ${key}`, 'openai-beta': 'realtime=v1' },
    );
    const errors = ctx.logs.lines.filter((l) => /"level":(50|60)/.test(l));
    expect(errors, errors.join('\n')).to.deep.equal([]);
  });

  it('the native stream: hostile values in session.update are an error event, the session stays open', async () => {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    for (const session of [
      { language: HOSTILE },
      { prompt: HOSTILE },
      { vad_threshold: HOSTILE },
      { language: [HOSTILE] },
    ]) {
      const from = c.events.length;
      c.send({ type: 'session.update', ...session });
      await c.waitFor((evs) =>
        evs.slice(from).some((e) => e.type === 'error' || e.type === 'session.updated'),
      );
    }
    expect(c.ws.readyState, 'still open').to.equal(1);
    const errors = ctx.logs.lines.filter((l) => /"level":(50|60)/.test(l));
    expect(errors, errors.join('\n')).to.deep.equal([]);
    c.ws.close(1000);
  });
});
