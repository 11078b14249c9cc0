/**
 * Prompt and vocabulary biasing of the built-in engine (issue 37), through
 * the API with a real database and real decoding: a clip full of words the
 * engine's model lacks gives them only when the request's prompt or the
 * key's vocabulary names them, spelled as they were written; one key's
 * vocabulary never reaches another key's transcripts on the same decoders;
 * a vocabulary the engine cannot pronounce is refused with 400; the
 * operator keeps any key's list; the realtime tier takes a prompt from
 * `session.update` for its next utterance.
 */
import { expect } from 'chai';
import request from 'supertest';
import { pcmToWav } from '../../shared/audio/index.js';
import { startSpeechApp, type SpeechTestApp } from './app.js';
import { ADMIN_PREFIX } from '../../api/routes/admin/index.js';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import { termsClip } from '../audio/corpus/terms.js';
import { connect, bearer, silence, realtimeWithBuiltinEngine } from '../realtime/helpers.js';

const SEGMENT = SEGMENT_PATH;
const ADMIN = 'prompt-test-admin-token';
const clipWav = (name: string) => {
  const clip = termsClip(name);
  return { wav: pcmToWav(clip.pcm), pcm: clip.pcm, clip };
};
// "we moved the grafana dashboards onto kubernetes last week", flite slt, clean.
const k8s = clipWav('00-0-flite-slt-clean.flac');
// "the doctor switched her from metformin to ozempic in june", flite rms, faster speech.
const drugs = clipWav('01-0-flite-rms-fast.flac');

describe('prompt and vocabulary bias the built-in engine (issue 37)', function () {
  this.timeout(300_000);
  let t: SpeechTestApp;
  before(async () => {
    t = await startSpeechApp({ GATEWAY_ADMIN_TOKEN: ADMIN, STT_THREADS: '1' });
  });
  after(async () => t?.close());

  const upload = async (key: string, wav: Buffer, prompt?: string) => {
    const req = request(t.url)
      .post(SEGMENT)
      .set('Authorization', `Bearer ${key}`)
      .attach('file', wav, 'clip.wav');
    if (prompt !== undefined) req.field('prompt', prompt);
    const res = await req.field('response_format', 'json').expect(200);
    return res.body.text as string;
  };

  it('a segment upload gives the prompt’s words, spelled as the prompt writes them', async () => {
    const { key } = await t.issueKey();
    const without = await upload(key, k8s.wav);
    expect(without).not.to.match(/kubernetes|grafana/i);
    const withPrompt = await upload(key, k8s.wav, 'Dashboards for Kubernetes and Grafana.');
    expect(withPrompt).to.include('Kubernetes').and.to.include('Grafana');
    const drugsText = await upload(key, drugs.wav, 'metformin, Ozempic, lisinopril');
    expect(drugsText).to.include('metformin').and.to.include('Ozempic');
    // The decoder went back to the general model: the same clip without a prompt is as before.
    expect(await upload(key, k8s.wav)).to.equal(without);
  });

  it("a key's vocabulary applies to its requests and to no other key's", async () => {
    const a = await t.issueKey();
    const b = await t.issueKey();
    const before = await upload(b.key, k8s.wav);
    const put = await request(t.url)
      .put('/v1/vocabulary')
      .set('Authorization', `Bearer ${a.key}`)
      .send({ words: [{ word: 'Kubernetes' }, { word: 'Grafana', spoken: ['graph ana'] }] })
      .expect(200);
    expect(put.body.words).to.have.length(2);
    expect(
      (await request(t.url).get('/v1/vocabulary').set('Authorization', `Bearer ${a.key}`).expect(200)).body
        .words,
    ).to.deep.equal(put.body.words);
    const withVocabulary = await upload(a.key, k8s.wav);
    expect(withVocabulary).to.include('Kubernetes');
    // Same process, same decoder, which now holds the words: the other key's transcript is unchanged.
    expect(await upload(b.key, k8s.wav)).to.equal(before);
    await request(t.url)
      .delete('/v1/vocabulary')
      .set('Authorization', `Bearer ${a.key}`)
      .expect(200, { words: [] });
    expect(await upload(a.key, k8s.wav)).not.to.include('Kubernetes');
  });

  it('refuses words nobody can pronounce, and bad shapes, with 400 in the error shape', async () => {
    const { key } = await t.issueKey();
    const bad = await request(t.url)
      .put('/v1/vocabulary')
      .set('Authorization', `Bearer ${key}`)
      .send({ words: [{ word: 'Kubernetes' }, { word: 'Жёлудь' }] })
      .expect(400);
    expect(bad.body.error.code).to.equal('unpronounceable_words');
    expect(bad.body.error.message).to.include('Жёлудь');
    const tooMany = { words: Array.from({ length: 501 }, (_, i) => ({ word: `word${'x'.repeat(i % 5)}` })) };
    for (const body of [
      { words: [{ word: '' }] },
      { words: [{ word: 'a', extra: 1 }] },
      tooMany,
      { words: 'x' },
      // Not text: controls, direction overrides, line breaks, NUL (before it reaches the store).
      { words: [{ word: '\u202eevil\u202c' }] },
      { words: [{ word: 'foo\nbar' }] },
      { words: [{ word: 'a\u0000b' }] },
      { words: [{ word: 'Kuber\u200bnetes' }] },
      { words: [{ word: '\ufeffKubernetes' }] },
      { words: [{ word: 'Kubernetes\u{e0001}' }] },
      { words: [{ word: 'zork', spoken: ['a\tb'] }] },
    ])
      expect(
        (
          await request(t.url)
            .put('/v1/vocabulary')
            .set('Authorization', `Bearer ${key}`)
            .send(body)
            .expect(400)
        ).body.error.code,
      ).to.equal('invalid_request');
    await request(t.url).put('/v1/vocabulary').send({ words: [] }).expect(401);
  });

  it('the operator keeps any key’s vocabulary under the admin prefix', async () => {
    const { key, id } = await t.issueKey();
    const admin = (r: request.Test) => r.set('Authorization', `Bearer ${ADMIN}`);
    const res = await admin(request(t.url).put(`${ADMIN_PREFIX}/keys/${id}/vocabulary`))
      .send({ words: [{ word: 'Ozempic' }] })
      .expect(200);
    expect(res.body).to.deep.equal({ ok: true, data: { words: [{ word: 'Ozempic' }] } });
    expect(
      (await admin(request(t.url).get(`${ADMIN_PREFIX}/keys/${id}/vocabulary`)).expect(200)).body.data.words,
    ).to.have.length(1);
    expect(await upload(key, drugs.wav)).to.include('Ozempic');
    const missing = await admin(request(t.url).put(`${ADMIN_PREFIX}/keys/key_doesnotexist/vocabulary`))
      .send({ words: [] })
      .expect(404);
    expect(missing.body.ok).to.equal(false);
    await request(t.url)
      .get(`${ADMIN_PREFIX}/keys/${id}/vocabulary`)
      .set('Authorization', `Bearer ${key}`)
      .expect(401);
  });
});

describe('the realtime tier takes a prompt from session.update (issue 37)', function () {
  this.timeout(300_000);
  const ctx = realtimeWithBuiltinEngine();

  async function finalText(prompt?: string): Promise<string> {
    const { key } = await ctx().issueKey('pro');
    const c = await connect(ctx().url, bearer(key));
    await c.next('session.created');
    c.send({ type: 'session.update', language: 'en', ...(prompt ? { prompt } : {}) });
    await c.next('session.updated');
    await c.stream(Buffer.concat([silence(300), k8s.pcm, silence(900)]), { frameBytes: 3200, pace: 0 });
    await c.finals(120_000);
    const text = c
      .of('conversation.item.input_audio_transcription.completed')
      .map((e) => e.text as string)
      .join(' ');
    c.ws.close(1000);
    await c.closed;
    return text;
  }

  it('the next utterance gives the prompt’s words', async () => {
    expect(await finalText()).not.to.match(/kubernetes|grafana/i);
    expect(await finalText('Kubernetes, Grafana, Prometheus')).to.match(/Kubernetes|Grafana/);
  });
});
