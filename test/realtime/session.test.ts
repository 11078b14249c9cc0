/**
 * RealtimeSession driven directly through a fake transport (the only thing
 * not real here: an object that records what the session sends and how it
 * closes). The real VAD (inline, silero) and the real built-in engine sit
 * behind it, so protocol parsing, utterance tracking and the close policy
 * (realtime/protocol.ts, utterances.ts, closePolicy.ts) are exercised as
 * the server runs them, without a socket in between.
 */
import { expect } from 'chai';
import { loadConfig, type Config } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import { BUILTIN_PLANS, type PlanLimits } from '../../shared/plans.js';
import type { Principal } from '../../shared/auth/index.js';
import type { VadService } from '../../realtime/vad/service.js';
import { CircuitBreaker } from '../../realtime/breaker.js';
import { RealtimeSession, type SessionSummary, type Transport } from '../../realtime/session.js';
import { wer } from '../speech/helpers.js';
import { readPcm, refs, silence, testVad } from './helpers.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const JFK = readPcm('jfk.wav');

/** Records every frame and the close; `buffered` is what bufferedAmount() answers. */
export class FakeTransport implements Transport {
  readonly sent: Record<string, any>[] = [];
  closed: { code: number; reason: string } | undefined;
  buffered = 0;
  send(text: string): void {
    if (this.closed) throw new Error('send after close');
    this.sent.push(JSON.parse(text));
  }
  bufferedAmount(): number {
    return this.buffered;
  }
  close(code: number, reason: string): void {
    if (this.closed) throw new Error('closed twice');
    this.closed = { code, reason };
  }
  of(type: string): Record<string, any>[] {
    return this.sent.filter((e) => e.type === type);
  }
  types(): string[] {
    return this.sent.map((e) => e.type);
  }
}

export async function until(ok: () => boolean, ms = 60_000): Promise<void> {
  const t0 = Date.now();
  while (!ok()) {
    if (Date.now() - t0 > ms) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('RealtimeSession through a fake transport (real VAD, real engine)', function () {
  this.timeout(120_000);
  let config: Config;
  let engine: BuiltinEngine;
  let vad: VadService;
  const logger = createLogger({ level: 'silent' });

  before(async () => {
    config = loadConfig({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
    engine = new BuiltinEngine(config.speech.builtin, logger);
    await engine.ready();
    vad = await testVad(config);
  });
  after(async () => {
    await engine?.close();
  });

  function open(o: { limits?: Partial<PlanLimits>; remaining?: number; now?: () => number } = {}): {
    s: RealtimeSession;
    t: FakeTransport;
    ended: Promise<SessionSummary>;
  } {
    const principal: Principal = {
      keyId: 'key_unit',
      ownerId: 'tenant-unit',
      plan: 'pro',
      limits: { ...BUILTIN_PLANS.pro, ...o.limits },
      via: 'api_key',
    };
    const t = new FakeTransport();
    const s = new RealtimeSession(principal, o.remaining ?? 3600, t, {
      config: config.realtime,
      engine,
      breaker: new CircuitBreaker(config.realtime.breaker),
      vad,
      logger,
      now: o.now,
    });
    const ended = new Promise<SessionSummary>((r) => (s.onEnded = r));
    s.start();
    return { s, t, ended };
  }

  it('session.created first, with the fixed audio format, plan, limits and effective settings', () => {
    const { s, t } = open({ remaining: 120.7 });
    expect(t.sent).to.have.length(1);
    const ev = t.sent[0];
    expect(Object.keys(ev)).to.deep.equal([
      'type',
      'request_id',
      'session_id',
      'audio',
      'turn_detection',
      'plan',
      'limits',
      'session',
    ]);
    expect(ev.session_id).to.equal(s.sessionId);
    expect(ev.audio).to.deep.equal({ format: 'pcm_s16le', sample_rate: 16000, channels: 1 });
    expect(ev.limits.remaining_audio_seconds).to.equal(120);
    expect(ev.session.language).to.equal('auto');
    s.onTransportClosed(1000);
  });

  it('client mistakes are error events and the session stays open; an oversized frame closes 1009', async () => {
    const { s, t, ended } = open();
    s.onText('not json');
    s.onText('[1,2]');
    s.onText('{"no":"type"}');
    s.onText('{"type":"nope"}');
    s.onText('{"type":"input_audio_buffer.append","audio":"@@@@"}');
    s.onText('{"type":"input_audio_buffer.append","audio":5}');
    s.onBinary(new ArrayBuffer(3));
    s.onText('{"type":"session.update","vad_threshold":7}');
    expect(t.of('error').map((e) => e.code)).to.deep.equal([
      'invalid_json',
      'invalid_json',
      'missing_type',
      'unknown_type',
      'invalid_audio',
      'invalid_audio',
      'invalid_audio',
      'invalid_session_update',
    ]);
    expect(t.of('error').at(-1)!.field).to.equal('vad_threshold');
    expect(t.closed).to.equal(undefined);
    s.onBinary(new ArrayBuffer(config.realtime.maxFrameBytes + 2));
    expect(t.sent.at(-1)).to.include({ type: 'error', code: 'audio_frame_too_large' });
    expect(t.closed).to.deep.equal({ code: 1009, reason: 'audio_frame_too_large' });
    expect((await ended).closeCode).to.equal(1009);
    // Nothing is taken once closed.
    const n = t.sent.length;
    s.onText('{"type":"nope"}');
    expect(t.sent).to.have.length(n);
  });

  it('session.update answers session.updated with the effective settings and the stripped names', () => {
    const { s, t } = open();
    s.onText(
      JSON.stringify({ type: 'session.update', session: { language: 'English', vadSilenceMs: 700 }, x: 1 }),
    );
    const up = t.of('session.updated')[0];
    expect(up.session).to.include({ language: 'en', vad_silence_ms: 700 });
    expect(up.ignored_fields).to.deep.equal(['x']);
    expect(up.audio).to.deep.equal({ format: 'pcm_s16le', sample_rate: 16000, channels: 1 });
    s.onTransportClosed(1000);
  });

  it('a clip gives started < stopped < completed per utterance with the words, billed by its audio', async () => {
    const { s, t, ended } = open();
    const pcm = Buffer.concat([silence(300), JFK, silence(1200)]);
    for (let off = 0; off < pcm.length; off += 3200) {
      const piece = pcm.subarray(off, off + 3200);
      s.onBinary(piece.buffer.slice(piece.byteOffset, piece.byteOffset + piece.length) as ArrayBuffer);
    }
    // Every turn stopped and answered, and nothing new for a second (turns are judged at the decoder's pace).
    for (let seen = -1; seen !== t.sent.length;) {
      await until(() => {
        const started = t.of('input_audio_buffer.speech_started').length;
        const stopped = t.of('input_audio_buffer.speech_stopped').length;
        return (
          stopped > 0 &&
          started === stopped &&
          t.of(COMPLETED).length === stopped &&
          s.inFlight.utterances === 0
        );
      });
      seen = t.sent.length;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const idx = t.of('input_audio_buffer.speech_started').map((e) => e.utterance_index);
    expect(idx).to.deep.equal(idx.map((_, k) => k));
    for (const i of idx) {
      const pos = (type: string) => t.sent.findIndex((e) => e.type === type && e.utterance_index === i);
      expect(pos('input_audio_buffer.speech_started')).to.be.lessThan(
        pos('input_audio_buffer.speech_stopped'),
      );
      expect(pos('input_audio_buffer.speech_stopped')).to.be.lessThan(pos(COMPLETED));
    }
    const text = t
      .of(COMPLETED)
      .sort((a, b) => a.utterance_index - b.utterance_index)
      .map((e) => e.text)
      .join(' ');
    expect(wer(refs().get('jfk.wav')!, text)).to.be.below(0.5);
    expect(Object.keys(t.of(COMPLETED)[0])).to.deep.equal([
      'type',
      'utterance_index',
      'language',
      'audio_duration_ms',
      'speech_duration_ms',
      'text',
      'latency_ms',
      'words',
    ]);
    s.onTransportClosed(1000);
    const sum = await ended;
    expect(sum.closeCode).to.equal(1000);
    expect(sum.audioSeconds).to.be.closeTo(pcm.length / 32000, 0.001);
    expect(t.closed, 'the client closed: no close frame from the server').to.equal(undefined);
  });

  it('an abrupt close with an utterance open reports it stopped (session_closed) and failed before the close frame', async () => {
    const { s, t } = open();
    // VAD off: every sample is speech, so the utterance stays open until the close.
    s.onText('{"type":"session.update","vad":false}');
    const speech = JFK.subarray(0, 32000 * 2);
    for (let off = 0; off < speech.length; off += 3200) {
      const piece = speech.subarray(off, off + 3200);
      s.onBinary(piece.buffer.slice(piece.byteOffset, piece.byteOffset + piece.length) as ArrayBuffer);
    }
    await until(() => t.of('input_audio_buffer.speech_started').length > 0);
    s.end('upstreamBackpressure');
    expect(t.types().slice(-3)).to.deep.equal(['input_audio_buffer.speech_stopped', 'error', COMPLETED]);
    expect(t.sent.at(-3)!.reason).to.equal('session_closed');
    expect(t.sent.at(-1)!.error.code).to.equal('transcription_failed');
    expect(t.closed).to.deep.equal({ code: 1013, reason: 'upstream_backpressure' });
  });

  it('housekeeping: idle closes 4408, wall clock 1008 session_duration_limit', async () => {
    let clock = 1_000_000;
    const a = open({ now: () => clock, limits: { idleTimeoutSeconds: 5, maxSessionSeconds: 60 } });
    clock += 4_999;
    a.s.tick();
    expect(a.t.closed).to.equal(undefined);
    clock += 1;
    a.s.tick();
    expect(a.t.closed).to.deep.equal({ code: 4408, reason: 'idle_timeout' });

    // Empty or sub-10 ms frames are not activity (they held a session past its idle timeout).
    clock = 1_500_000;
    const c = open({ now: () => clock, limits: { idleTimeoutSeconds: 5, maxSessionSeconds: 60 } });
    for (let k = 0; k < 5; k++) {
      clock += 1000;
      c.s.onBinary(new ArrayBuffer(k % 2 ? 0 : 2));
      c.s.tick();
    }
    await until(() => c.t.closed !== undefined);
    expect(c.t.closed).to.deep.equal({ code: 4408, reason: 'idle_timeout' });

    clock = 2_000_000;
    const b = open({ now: () => clock, limits: { idleTimeoutSeconds: 5, maxSessionSeconds: 10 } });
    for (let k = 0; k < 10; k++) {
      clock += 1000;
      b.s.onBinary(new ArrayBuffer(320));
      b.s.tick();
    }
    // A limit close drains: the open utterance (none here) is flushed through the VAD first.
    await until(() => b.t.closed !== undefined);
    expect(b.t.closed).to.deep.equal({ code: 1008, reason: 'session_duration_limit' });
  });

  it('budgets: no window left closes at once (1008 audio_quota_exhausted); session audio over its limit 1008 session_audio_limit', async () => {
    const a = open({ remaining: 0 });
    expect(a.t.types()).to.deep.equal(['session.created']);
    expect(a.t.closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
    expect((await a.ended).audioSeconds).to.equal(0);

    const b = open({ limits: { maxAudioSecondsPerSession: 1 } });
    b.s.onBinary(new ArrayBuffer(32000));
    expect(b.t.closed).to.equal(undefined);
    b.s.onBinary(new ArrayBuffer(2));
    await until(() => b.t.closed !== undefined);
    expect(b.t.closed).to.deep.equal({ code: 1008, reason: 'session_audio_limit' });
  });

  it('a client that stops reading is closed 1013 client_backpressure', async () => {
    const { s, t, ended } = open();
    t.buffered = config.realtime.clientBackpressureBytes + 1;
    s.onText('{"type":"nope"}');
    expect(t.closed).to.deep.equal({ code: 1013, reason: 'client_backpressure' });
    expect((await ended).closeReason).to.equal('client_backpressure');
  });
});
