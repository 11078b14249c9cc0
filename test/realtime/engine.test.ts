/**
 * The speech client in a worker thread (remote pool) against a real engine/
 * worker process: same answers as the pool in this thread, aborts reach the
 * thread (the worker is held with SIGSTOP meanwhile), failures come back as
 * SpeechError (the worker killed).
 */
import { expect } from 'chai';
import { ThreadedEngine } from '../../realtime/threadedEngine.js';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { RemotePool } from '../../shared/stt/remote.js';
import { SpeechError } from '../../shared/stt/types.js';
import { startEngine, type EngineProcess } from '../speech/helpers.js';
import { readPcm } from './helpers.js';

describe('realtime: speech client in a worker thread', function () {
  this.timeout(60_000);
  let worker: EngineProcess;
  before(async () => {
    worker = await startEngine();
  });
  after(async () => {
    await worker?.kill();
  });

  it('transcribes through the remote pool, aborts, and reports failures', async () => {
    const env = {
      ...process.env,
      STT_WORKER_URLS: worker.url,
      STT_ATTEMPT_TIMEOUT_MS: '20000',
      STT_BUDGET_MS: '20000',
      LOG_LEVEL: 'silent',
    };
    const pcm = readPcm('librivox-austen-0880.wav').subarray(0, 48000); // 1.5 s: decoding is real, keep it short
    const here = new RemotePool(
      loadConfig(env, { speech: { remote: { healthTimeoutMs: 2000 } } }).speech.remote,
      createLogger({ level: 'silent' }),
    );
    const expected = await here.transcribe({ pcm, language: 'en' }).finally(() => here.close());
    const engine = await ThreadedEngine.start(env);
    try {
      const r = await engine.transcribe({ pcm, language: 'en' });
      expect(r.text).to.not.be.empty;
      expect(r.text).to.equal(expected.text);
      expect(r.words.map((w) => w.word)).to.deep.equal(expected.words.map((w) => w.word));
      expect(r.duration).to.be.closeTo(1.5, 0.01);
      expect(pcm.length).to.be.greaterThan(0); // the caller's buffer is intact
      expect(await engine.healthy()).to.equal(true);
      const ac = new AbortController();
      worker.child.kill('SIGSTOP'); // the request cannot finish before the abort
      try {
        const p = engine.transcribe({ pcm, signal: ac.signal });
        setTimeout(() => ac.abort(), 50);
        const err = await p.then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).to.be.instanceOf(SpeechError);
      } finally {
        worker.child.kill('SIGCONT');
      }
    } finally {
      await engine.close();
    }
    await worker.kill();
    const down = await ThreadedEngine.start(env);
    try {
      const err = await down.transcribe({ pcm: Buffer.alloc(3200) }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(SpeechError);
      expect((err as SpeechError).code).to.equal('transcription_failed');
    } finally {
      await down.close();
    }
  });
});
