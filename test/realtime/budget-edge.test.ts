/**
 * The frame that crosses a budget (issue 36): it was billed whole and never
 * transcribed (5 s left, one 1 MiB frame billed 32.768 s; three appends on a
 * fresh 60 s window billed 62.7 s). Now only the audio inside the budget is
 * taken: it is billed and transcribed, the rest refused with the close.
 */
import { expect } from 'chai';
import {
  bearer,
  connect,
  createRealtimeContext,
  finalUsage,
  readPcm,
  type RealtimeTestContext,
} from './helpers.js';
import { startSpeechUpstream, type SpeechUpstream } from './upstream.js';

const MiB = 1024 * 1024;
const COMPLETED = 'conversation.item.input_audio_transcription.completed';

/** `pcm` repeated to exactly `bytes`. */
function repeatTo(pcm: Buffer, bytes: number): Buffer {
  return Buffer.concat(Array.from({ length: Math.ceil(bytes / pcm.length) }, () => pcm)).subarray(0, bytes);
}

describe('realtime: the frame that crosses the budget', function () {
  this.timeout(120_000);
  let ctx: RealtimeTestContext;
  let upstream: SpeechUpstream;
  before(async () => {
    upstream = await startSpeechUpstream();
    ctx = await createRealtimeContext({
      engine: upstream.engine,
      env: {
        PLANS_JSON: JSON.stringify({
          window20: { maxConcurrentConnections: 5, maxAudioSecondsPerWindow: 20 },
          window60: { maxConcurrentConnections: 5, maxAudioSecondsPerWindow: 60 },
          session10: { maxConcurrentConnections: 5, maxAudioSecondsPerSession: 10 },
        }),
      },
    });
  });
  after(async () => {
    await ctx?.close();
    await upstream?.close();
  });

  /** A session of a new key of the 20 s window plan that has billed `seconds` already. */
  async function openAfterBills(seconds: number) {
    const { key, id } = await ctx.issueKey('window20');
    await ctx
      .db('usage_events')
      .insert({ key_id: id, plane: 'segment', ref_id: 'seed-' + id, audio_seconds: seconds });
    const c = await connect(ctx.url, bearer(key));
    return { c, created: await c.next('session.created') };
  }

  it('5 s left in the window, one 1 MiB frame: 5 s billed and transcribed, then 1008 audio_quota_exhausted', async () => {
    const { c, created } = await openAfterBills(15);
    expect(created.limits.remaining_audio_seconds).to.equal(5);
    c.ws.send(repeatTo(readPcm('jfk.wav'), MiB));
    expect(await c.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
    const [row] = await finalUsage(ctx, created.session_id);
    expect(Number(row.audio_seconds)).to.be.within(4.99, 5.001);
    expect(JSON.stringify(c.of(COMPLETED))).to.match(/fellow|american|country/);
  });

  it('a window with less than a millisecond left (0.4 ms): 1008 audio_quota_exhausted at once', async () => {
    const { c, created } = await openAfterBills(19.9996);
    expect(created.limits.remaining_audio_seconds).to.equal(0);
    // Before: admitted and held open until its first frame (a trial's key, showing 0 s left, stayed 8 s).
    expect(await c.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
  });

  it('a per-session budget of 10 s, one 1 MiB frame: at most 10 s billed, transcribed, then 1008 session_audio_limit', async () => {
    const { key } = await ctx.issueKey('session10');
    const c = await connect(ctx.url, bearer(key));
    const created = await c.next('session.created');
    c.ws.send(repeatTo(readPcm('jfk.wav'), MiB));
    expect(await c.closed).to.deep.equal({ code: 1008, reason: 'session_audio_limit' });
    const [row] = await finalUsage(ctx, created.session_id);
    // At most the budget; less when utterances past max_concurrent_utterances were dropped (unbilled).
    expect(Number(row.audio_seconds)).to.be.within(0.5, 10.001);
    expect(JSON.stringify(c.of(COMPLETED))).to.match(/fellow|american|country/);
  });

  it('/v1/realtime, a fresh 60 s window, three 21 s appends at 24 kHz: 60 s billed, not 63', async () => {
    const { key } = await ctx.issueKey('window60');
    const c = await connect(`ws://127.0.0.1:${ctx.rt.port}/v1/realtime`, bearer(key));
    const created = await c.next('session.created');
    const sessionId = created.session.id as string;
    // 21 s of 24 kHz silence per append (below the 1 MiB frame limit once decoded; silence opens no
    // utterance, so none is dropped for max_concurrent_utterances and every byte taken is billed).
    const chunk = Buffer.alloc(21 * 48000);
    for (let i = 0; i < 3; i++)
      c.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') });
    expect((await c.closed).code).to.equal(1008);
    const [row] = await finalUsage(ctx, sessionId);
    expect(Number(row.audio_seconds)).to.be.within(59.99, 60.001);
  });
});
