/**
 * Batch through a remote speech pool of one real engine/ worker process,
 * with the pool's interface-section-8 defaults (800 ms per attempt, 1.6 s in
 * all) left as they are: batch pieces get a per-request attempt timeout that
 * scales with their audio (BATCH_STT_ATTEMPT_TIMEOUT_*), other requests keep
 * the defaults.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { RemotePool } from '../../shared/stt/remote.js';
import { SpeechError } from '../../shared/stt/types.js';
import { clip, pcmOf, startEngine, type EngineProcess } from '../speech/helpers.js';
import {
  buildRecording,
  createBatchTestApp,
  issueKey,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from './helpers.js';

describe('batch: remote speech worker, attempt timeouts scaled to the audio', function () {
  this.timeout(180_000);
  let engine: EngineProcess;
  let files: FileServer;
  const dir = tmpDir('batch-remote-');

  before(async () => {
    // ~22 s: jfk (11 s, 2-4 s to decode here) and librispeech-1221 (16.7 s) split at the pause.
    buildRecording(path.join(dir, 'talk.wav'), ['jfk.wav', 'librispeech-1221-135766-0001.wav'], 1.0);
    files = await startFileServer(dir);
    engine = await startEngine();
  });
  after(async () => {
    await files?.close();
    await engine?.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function runJob(env: Record<string, string>) {
    const t: BatchTestApp = await createBatchTestApp(
      {
        STT_WORKER_URLS: `w1=${engine.url}`,
        BATCH_SPLIT_UTTERANCES: 'false', // whole chunks, as a long-context (Whisper) worker would get them
        ...env,
      },
      {
        start: true,
        overrides: {
          // A busy test machine must not make the live worker look dead.
          speech: { remote: { healthTimeoutMs: 2000 } },
          batch: { chunkAttempts: 1 },
        },
      },
    );
    try {
      const cfg = t.config.speech.remote;
      expect(cfg).to.include({ attemptTimeoutMs: 800, budgetMs: 1600 }); // section 8, untouched
      const key = (await issueKey(t, { ownerId: 'tenant-r', plan: 'pro' })).key;
      const sub = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `${files.url}/talk.wav`, segment_seconds: 14, concurrency: 1 });
      expect(sub.status).to.equal(202);
      const id = sub.body.workflow_id as string;
      const done = await waitFor(
        async () => {
          const r = await request(t.server).get(`/${id}`).set('authorization', `Bearer ${key}`);
          return r.body.status === 'complete' || r.body.status === 'errored' ? r.body : undefined;
        },
        150_000,
        250,
      );
      const row = await t.runtime.repo.get(id);
      return { done, slices: (row!.output.slice as { slices: { start: number; end: number }[] }).slices };
    } finally {
      await t.close();
    }
  }

  it('completes a job whose chunks take the worker far longer than 800 ms', async () => {
    const { done, slices } = await runJob({});
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    expect(slices).to.have.length(2);
    const chunks = done.output.chunks as { engine_ms: number; reused: boolean }[];
    expect(chunks.every((c) => !c.reused)).to.equal(true);
    // Each chunk was one call to the worker (no split), and each took longer than section 8 allows.
    for (const c of chunks) expect(c.engine_ms).to.be.above(800);
    const text = (done.output.result.segments as { text: string }[])
      .map((s) => s.text)
      .join(' ')
      .toLowerCase();
    expect(text).to.match(/country/);
  });

  it('the timeout is base + per audio second of the piece (BATCH_STT_ATTEMPT_TIMEOUT_*)', async () => {
    // 1 ms + 20 ms per audio second: ~230 ms for the first ~11.5 s chunk, far too short for the worker.
    const { done, slices } = await runJob({
      BATCH_STT_ATTEMPT_TIMEOUT_BASE_MS: '1',
      BATCH_STT_ATTEMPT_TIMEOUT_PER_AUDIO_SECOND_MS: '20',
    });
    expect(done.status).to.equal('errored');
    const expected = Math.round(1 + 20 * (slices[0].end - slices[0].start));
    expect(done.error.name).to.equal('SpeechError');
    expect(done.error.message).to.contain(`w1: no answer within ${expected} ms`);
  });

  it('requests without an override keep 800 ms per attempt; with one, the same clip succeeds', async () => {
    const pool = new RemotePool(
      loadConfig({ STT_WORKER_URLS: `w1=${engine.url}` }, { speech: { remote: { healthTimeoutMs: 2000 } } })
        .speech.remote,
      createLogger({ level: 'silent' }),
    );
    try {
      await pool.ready();
      const pcm = pcmOf(clip('jfk.wav').path);
      const err = await pool.transcribe({ pcm }).catch((e: unknown) => e);
      expect(err).to.be.instanceOf(SpeechError);
      expect((err as SpeechError).message).to.match(/no answer within 800 ms/);
      await pool.checkAll(); // the failed attempt marked the worker down; it is up again
      const ok = await pool.transcribe({ pcm, attemptTimeoutMs: 60_000 });
      expect(ok.engineMs).to.be.above(800);
      expect(ok.text.toLowerCase()).to.match(/country/);
    } finally {
      await pool.close();
    }
  });
});
