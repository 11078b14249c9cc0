/**
 * Faults: one of two real engine worker processes (engine/server.ts) is
 * killed (SIGKILL) while the API sends it segment requests. Invariants: the
 * API answers every request with a success or a documented error
 * (502 transcription_failed, 503 with Retry-After), keeps serving through
 * the remaining worker, and each request answered 200 is billed once.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import { AUDIO_DIR, startEngine, type EngineProcess } from '../speech/helpers.js';
import { leaks, waitFor } from './cluster.js';

describe('faults: an engine worker killed under segment load', function () {
  this.timeout(180_000);
  let engines: EngineProcess[] = [];
  let t: TestApp;
  let key: string;
  let keyId: string;

  before(async () => {
    engines = await Promise.all([startEngine(), startEngine()]);
    t = await createTestApp(
      {
        STT_WORKER_URLS: engines.map((e) => e.url).join(','),
        // Correctness under a kill, not speed: a loaded CI machine must not time decodes out.
        STT_ATTEMPT_TIMEOUT_MS: '8000',
        STT_BUDGET_MS: '16000',
        PLANS_JSON: JSON.stringify({
          load: { maxRequestsPerMinute: 100_000, maxAudioSecondsPerWindow: 1e7 },
        }),
      },
      { overrides: { speech: { remote: { healthTimeoutMs: 2000 } } } },
    );
    ({ key, id: keyId } = await issueKey(t, { plan: 'load' }));
  });
  after(async () => {
    await t?.close();
    await Promise.all(engines.map((e) => e.kill()));
  });

  it('answers 200 or a documented error throughout and keeps serving on the other worker', async () => {
    const audio = fs.readFileSync(path.join(AUDIO_DIR, 'librivox-austen-0880.wav'));
    const answers: request.Response[] = [];
    const send = async () => {
      const res = await request(t.server)
        .post('/v1/audio/transcriptions')
        .set('authorization', `Bearer ${key}`)
        .attach('file', audio, 'clip.wav');
      answers.push(res);
      return res;
    };
    let running = true;
    const load = (async () => {
      while (running) await Promise.all([send(), send()]);
    })();
    const ids = t.deps.speech.workerIds();
    // The worker about to be killed is serving (else the kill would prove nothing).
    await waitFor(
      'the first worker serving',
      async () => answers.some((r) => r.status === 200 && r.headers['x-worker-id'] === ids[0]),
      60_000,
      100,
    );
    await engines[0].kill();
    // The kill happened: the process has exited on SIGKILL.
    expect(engines[0].child.signalCode, 'the first worker was killed').to.equal('SIGKILL');
    const afterKill = answers.length;
    // The load goes on until a dozen more answers came back after the kill.
    await waitFor('answers after the kill', async () => answers.length >= afterKill + 12, 90_000, 100);
    running = false;
    await load;
    // Nothing answered 200 from the dead worker after it died (a kill that did nothing fails here).
    const late = answers.slice(afterKill + 2).filter((r) => r.status === 200);
    expect(late.map((r) => r.headers['x-worker-id'])).to.not.include(ids[0]);
    // Failover observed: the service answers from the other worker once the first is gone.
    await waitFor(
      'a 200 on the remaining worker',
      async () => {
        const r = await send();
        return r.status === 200 && r.headers['x-worker-id'] === ids[1];
      },
      60_000,
      200,
    ).catch((err: Error) => {
      const seen = answers.map((r) => `${r.status} ${r.status === 200 ? '' : r.text}`).slice(-12);
      throw new Error(`${err.message}:\n${seen.join('\n')}`);
    });

    for (const r of answers) {
      if (r.status === 200) continue;
      expect([502, 503], r.text).to.include(r.status);
      if (r.status === 503) expect(r.headers['retry-after'], r.text).to.match(/^\d+$/);
      expect(r.body.error.code, r.text).to.be.a('string');
      expect(leaks(r.text)).to.deep.equal([]);
    }
    const ok = answers.filter((r) => r.status === 200).length;
    const rows = await t.deps.db('usage_events').where({ key_id: keyId, plane: 'segment' });
    expect(rows.length).to.equal(ok);
  });
});
