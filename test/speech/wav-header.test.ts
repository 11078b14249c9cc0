/**
 * Durations come from the audio, not the header (issue 22): a WAV whose data
 * chunk claims 1 s but holds the whole clip is transcribed and billed as
 * the whole clip; a WAV with a well-formed chunk after its data keeps its
 * declared length.
 */
import { expect } from 'chai';
import request from 'supertest';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import { canonicalWavSamples, pcmToWav } from '../../shared/audio/index.js';
import { startSpeechApp, type SpeechTestApp } from './app.js';
import { clip, pcmOf, wer } from './helpers.js';

/** The clip's WAV with its data size (and RIFF size) rewritten to claim `seconds`. */
function lyingWav(pcm: Buffer, seconds: number): Buffer {
  const wav = pcmToWav(pcm);
  wav.writeUInt32LE(seconds * 32000, 40);
  wav.writeUInt32LE(36 + seconds * 32000, 4);
  return wav;
}

describe('speech: a WAV header cannot hide audio', function () {
  this.timeout(120_000);
  let t: SpeechTestApp;
  let key: string;
  let keyId: string;
  const austen = clip('librispeech-1221-135766-0001.wav');
  const pcm = pcmOf(austen.path);

  before(async () => {
    t = await startSpeechApp({ STT_THREADS: '1' });
    ({ key, id: keyId } = await t.issueKey('pro'));
  });
  after(() => t?.close());

  it('reads the samples the file holds past a data size that stops short', () => {
    expect(canonicalWavSamples(lyingWav(pcm, 1))!.length).to.equal(pcm.length);
    // A real chunk after the data keeps the declared size.
    const list = Buffer.concat([
      pcmToWav(pcm.subarray(0, 32000)),
      Buffer.from('LIST\x04\x00\x00\x00INFO', 'latin1'),
    ]);
    expect(canonicalWavSamples(list)!.length).to.equal(32000);
  });

  it('transcribes and bills the whole clip when the header claims 1 s', async () => {
    const res = await request(t.url)
      .post(SEGMENT_PATH)
      .set('Authorization', `Bearer ${key}`)
      .attach('file', lyingWav(pcm, 1), 'clip.wav')
      .field('response_format', 'verbose_json');
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body.duration).to.be.closeTo(pcm.length / 32000, 0.01);
    expect(wer(austen.reference, res.body.text)).to.be.below(0.5);
    const rows = await t.deps.db('usage_events').where({ key_id: keyId, plane: 'segment' });
    expect(rows).to.have.length(1);
    expect(Number(rows[0].audio_seconds)).to.be.closeTo(pcm.length / 32000, 0.01);
  });
});
