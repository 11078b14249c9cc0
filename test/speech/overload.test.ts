/**
 * Overload is reported as overload (issue 22): more concurrent clip uploads
 * than the decoders can take in their wait limit get 503 `engine_overloaded`
 * with `Retry-After`, never 502 `transcription_failed` typed as the client's
 * mistake. Here one decoder, a 1.5 s wait limit and 12 uploads at once.
 */
import fs from 'node:fs';
import { expect } from 'chai';
import request from 'supertest';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import { startSpeechApp, type SpeechTestApp } from './app.js';
import { clip } from './helpers.js';

describe('speech: an overloaded engine answers 503 engine_overloaded with Retry-After', function () {
  this.timeout(180_000);
  let t: SpeechTestApp;
  let key: string;

  before(async () => {
    t = await startSpeechApp(
      { STT_THREADS: '1' },
      { overrides: { speech: { builtin: { queueTimeoutMs: 1500 } } } },
    );
    await t.deps.speech.ready?.();
    ({ key } = await t.issueKey('pro'));
  });
  after(() => t?.close());

  it('uploads that find no decoder in time are refused as overload, the rest transcribed', async () => {
    const wav = fs.readFileSync(clip('jfk.wav').path);
    const answers = await Promise.all(
      Array.from({ length: 12 }, () =>
        request(t.url)
          .post(SEGMENT_PATH)
          .set('Authorization', `Bearer ${key}`)
          .attach('file', wav, 'clip.wav')
          .field('response_format', 'json'),
      ),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200).length, String(statuses)).to.be.at.least(1);
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused.length, String(statuses)).to.be.at.least(1);
    for (const a of refused) {
      expect(a.status, JSON.stringify(a.body)).to.equal(503);
      expect(a.body.error.code).to.equal('engine_overloaded');
      expect(a.headers['retry-after']).to.match(/^\d+$/);
    }
  });
});
