/**
 * The speech client in a worker thread (remote pool): same answers, aborts
 * reach the thread, failures come back as SpeechError.
 */
import path from 'node:path';
import { fork, type ChildProcess } from 'node:child_process';
import { expect } from 'chai';
import { ThreadedEngine } from '../../realtime/threadedEngine.js';
import { SpeechError } from '../../shared/stt/types.js';
import { readPcm, repoRoot } from './helpers.js';

describe('realtime: speech client in a worker thread', function () {
  this.timeout(30_000);
  let worker: ChildProcess;
  let port: number;
  before(async () => {
    worker = fork(path.join(repoRoot, 'test/bench/realtime/fakeWorker.ts'), [], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, FAKE_DELAY_MS: '300' },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    port = await new Promise((r) => worker.on('message', (m: { port: number }) => r(m.port)));
  });
  after(() => {
    worker?.kill('SIGKILL');
  });

  it('transcribes through the remote pool, aborts, and reports failures', async () => {
    const env = { ...process.env, STT_WORKER_URLS: `http://127.0.0.1:${port}`, STT_ATTEMPT_TIMEOUT_MS: '5000', STT_BUDGET_MS: '5000', LOG_LEVEL: 'silent' };
    const engine = await ThreadedEngine.start(env);
    try {
      const pcm = readPcm('librivox-austen-0880.wav');
      const r = await engine.transcribe({ pcm, language: 'en' });
      expect(r.text).to.equal('hello world');
      expect(r.duration).to.be.closeTo(2.99, 0.05);
      expect(pcm.length).to.be.greaterThan(0); // the caller's buffer is intact
      expect(await engine.healthy()).to.equal(true);
      const ac = new AbortController();
      const p = engine.transcribe({ pcm, signal: ac.signal });
      setTimeout(() => ac.abort(), 50);
      const err = await p.then(() => null, (e: unknown) => e);
      expect(err).to.be.instanceOf(SpeechError);
    } finally {
      await engine.close();
    }
    const down = await ThreadedEngine.start({ ...env, STT_WORKER_URLS: 'http://127.0.0.1:9' });
    try {
      const err = await down.transcribe({ pcm: Buffer.alloc(3200) }).then(() => null, (e: unknown) => e);
      expect(err).to.be.instanceOf(SpeechError);
      expect((err as SpeechError).code).to.equal('transcription_failed');
    } finally {
      await down.close();
    }
  });
});
