import { expect } from 'chai';
import { createLogger } from '../../shared/logger.js';
import { loadConfig } from '../../shared/config/index.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import { createSpeechEngine, SpeechError } from '../../shared/stt/index.js';
import { toSrt, toVtt } from '../../shared/stt/formats.js';
import { loadClips, pcmOf, wer } from './helpers.js';

describe('speech: built-in PocketSphinx engine (worker threads)', function () {
  this.timeout(60_000);
  let engine: BuiltinEngine;
  const logger = createLogger({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

  before(async () => {
    const config = loadConfig({ STT_THREADS: '2' });
    engine = createSpeechEngine(config, logger) as BuiltinEngine;
    await engine.ready();
  });
  after(() => engine.close());

  it('transcribes the real clips with word times and confidences (mean WER under 35%)', async () => {
    const clips = loadClips().filter((c) => c.seconds <= 8);
    const results = await Promise.all(clips.map((c) => engine.transcribe({ pcm: pcmOf(c.path) })));
    const rates = results.map((r, i) => wer(clips[i].reference, r.text));
    const mean = rates.reduce((a, b) => a + b, 0) / rates.length;
    expect(mean, `WER per clip: ${rates.map((x) => x.toFixed(2)).join(', ')}`).to.be.below(0.35);
    for (const [i, r] of results.entries()) {
      expect(r.language).to.equal('en');
      expect(r.duration).to.be.closeTo(clips[i].seconds, 0.01);
      expect(r.workerId).to.match(/^builtin-[01]$/);
      expect(r.fallbackUsed).to.equal(false);
      expect(r.words.length).to.be.greaterThan(3);
      let last = 0;
      for (const w of r.words) {
        expect(w.start).to.be.at.least(last - 1e-9);
        expect(w.end).to.be.greaterThan(w.start);
        expect(w.end).to.be.at.most(r.duration + 0.02);
        expect(w.confidence).to.be.within(0, 1);
        last = w.end;
      }
      expect(r.segments.map((s) => s.text).join(' ')).to.equal(r.text);
    }
  });

  it('gives the same answer for the same clip whatever ran before (one utterance per clip, fresh stream)', async () => {
    const c = loadClips().find((x) => x.file === 'librivox-austen-0880.wav')!;
    const a = await engine.transcribe({ pcm: pcmOf(c.path), workerId: 'builtin-0' });
    const b = await engine.transcribe({ pcm: pcmOf(c.path), workerId: 'builtin-0' });
    expect(b.text).to.equal(a.text);
    expect(b.words).to.deep.equal(a.words);
    expect(a.words[0].start).to.be.below(1);
  });

  it('keeps the event loop free while decoding', async () => {
    const c = loadClips().find((x) => x.file === 'librispeech-1089-134686-0001.wav')!;
    // A blocked loop would tick once for the whole decode; a free one ticks
    // every 10 ms give or take scheduling on a busy 2-core machine.
    let ticks = 0;
    let maxLag = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      maxLag = Math.max(maxLag, now - last - 10);
      last = now;
      ticks++;
    }, 10);
    const started = performance.now();
    const r = await engine.transcribe({ pcm: pcmOf(c.path) });
    const elapsed = performance.now() - started;
    clearInterval(timer);
    expect(r.engineMs).to.be.greaterThan(300);
    expect(ticks).to.be.greaterThan(elapsed / 10 / 4);
    expect(maxLag).to.be.below(elapsed / 3);
  });

  it('answers silence and empty clips with empty text', async () => {
    const silence = await engine.transcribe({ pcm: Buffer.alloc(16000 * 2 * 2) });
    expect(silence.text).to.equal('');
    expect(silence.duration).to.equal(2);
    const empty = await engine.transcribe({ pcm: Buffer.alloc(0) });
    expect(empty.text).to.equal('');
    expect(empty.segments).to.deep.equal([]);
  });

  it('pins a decoder thread; refuses unknown workers and unsupported languages', async () => {
    const c = loadClips().find((x) => x.file === 'librivox-austen-0880.wav')!;
    const r = await engine.transcribe({ pcm: pcmOf(c.path), workerId: 'builtin-1', language: 'en-US' });
    expect(r.workerId).to.equal('builtin-1');
    const unknown = await engine
      .transcribe({ pcm: pcmOf(c.path), workerId: 'builtin-7' })
      .catch((e: unknown) => e);
    expect((unknown as SpeechError).code).to.equal('unknown_worker');
    const lang = await engine.transcribe({ pcm: pcmOf(c.path), language: 'de' }).catch((e: unknown) => e);
    expect(lang).to.be.instanceOf(SpeechError);
    expect((lang as SpeechError).code).to.equal('unsupported_language');
  });

  it('times out by the documented rules (queue wait; decode base + per audio second) and drops an aborted queued request', async () => {
    const slow = new BuiltinEngine(
      {
        ...loadConfig({}).speech.builtin,
        threads: 1,
        queueTimeoutMs: 200,
        timeoutBaseMs: 50,
        timeoutPerAudioSecondMs: 0,
      },
      logger,
    );
    try {
      await slow.ready();
      const c = loadClips().find((x) => x.file === 'librivox-austen-0880.wav')!;
      const started = Date.now();
      const err = await slow.transcribe({ pcm: pcmOf(c.path) }).catch((e: unknown) => e);
      expect((err as SpeechError).code).to.equal('timeout');
      expect(Date.now() - started).to.be.below(500);
      // The thread still finishes the abandoned decode: the next request waits in the queue and gives up.
      const queuedTooLong = await slow.transcribe({ pcm: pcmOf(c.path) }).catch((e: unknown) => e);
      expect((queuedTooLong as SpeechError).code).to.equal('timeout');
      expect((queuedTooLong as SpeechError).message).to.match(/No decoder became free within 200 ms/);
      const ac = new AbortController();
      const queued = slow.transcribe({ pcm: pcmOf(c.path), signal: ac.signal }).catch((e: unknown) => e);
      ac.abort();
      expect(((await queued) as SpeechError).code).to.equal('aborted');
    } finally {
      await slow.close();
    }
  });

  it('gives up loudly when decoders cannot load (bad model path), instead of restarting forever', async () => {
    const broken = new BuiltinEngine(
      { ...loadConfig({ POCKETSPHINX_MODEL_DIR: '/nonexistent' }).speech.builtin, threads: 1 },
      logger,
    );
    try {
      const err = await broken.ready().catch((e: unknown) => e);
      expect((err as Error).message).to.match(/fail to load/);
      expect(await broken.healthy()).to.equal(false);
      const refused = await broken.transcribe({ pcm: Buffer.alloc(3200) }).catch((e: unknown) => e);
      expect((refused as SpeechError).code).to.equal('transcription_failed');
    } finally {
      await broken.close();
    }
  });

  it('closes cleanly at any moment: while decoders load, and mid-decode', async () => {
    // Terminating a thread inside a native call (library load, decode) aborts
    // the whole process; close() must let the call return first.
    const cfg = { ...loadConfig({}).speech.builtin, threads: 2 };
    for (const delayMs of [0, 20, 200]) {
      const e = new BuiltinEngine(cfg, logger);
      await new Promise((r) => setTimeout(r, delayMs));
      await e.close();
      expect(await e.healthy()).to.equal(false);
    }
    const busy = new BuiltinEngine(cfg, logger);
    await busy.ready();
    const [clip] = loadClips().sort((a, b) => a.seconds - b.seconds);
    const pending = busy.transcribe({ pcm: pcmOf(clip.path) }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    await busy.close();
    const outcome = await pending;
    expect(
      outcome instanceof SpeechError || typeof (outcome as { text?: string }).text === 'string',
    ).to.equal(true);
  });

  it('renders SRT and VTT from the segments', () => {
    const t = {
      text: 'hello world again',
      language: 'en',
      duration: 4,
      segments: [
        { id: 0, start: 0.21, end: 1.5, text: 'hello world', confidence: 0.9 },
        { id: 1, start: 2.25, end: 3661.007, text: 'again', confidence: 0.8 },
      ],
      words: [],
    };
    expect(toSrt(t)).to.equal(
      '1\n00:00:00,210 --> 00:00:01,500\nhello world\n\n2\n00:00:02,250 --> 01:01:01,007\nagain\n',
    );
    expect(toVtt(t)).to.equal(
      'WEBVTT\n\n00:00:00.210 --> 00:00:01.500\nhello world\n\n00:00:02.250 --> 01:01:01.007\nagain\n',
    );
  });
});

describe('speech: clip threads on demand (the realtime tier, where the clip form is a fallback)', function () {
  this.timeout(60_000);
  const logger = createLogger({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

  it('holds no clip decoder until the first clip, then starts them and answers it', async () => {
    const config = loadConfig({ STT_THREADS: '1' });
    const engine = new BuiltinEngine({ ...config.speech.builtin, clipOnDemand: true }, logger);
    try {
      await engine.ready();
      expect(engine.stats().threads, 'none started').to.equal(0);
      expect(await engine.healthy()).to.equal(true);
      expect(engine.workerIds()).to.deep.equal(['builtin-0']);
      const c = loadClips().find((x) => x.file === 'jfk.wav')!;
      const r = await engine.transcribe({ pcm: pcmOf(c.path), workerId: 'builtin-0' });
      expect(wer(c.reference, r.text)).to.be.below(0.35);
      expect(engine.stats()).to.include({ threads: 1, ready: 1 });
      expect(await engine.healthy()).to.equal(true);
    } finally {
      await engine.close();
    }
  });

  it('is how the realtime process builds its engine when the streaming form is on', async () => {
    const { createRealtimeDeps } = await import('../../realtime/main.js');
    const { createTestDatabase } = await import('../helpers/db.js');
    const db = await createTestDatabase('stt_clip_demand');
    const deps = await createRealtimeDeps(loadConfig({ DATABASE_URL: db.url, STT_THREADS: '1' }), logger);
    try {
      expect((deps.engine as BuiltinEngine).stats().threads).to.equal(0);
    } finally {
      await deps.close();
      await db.drop();
    }
  });
});
