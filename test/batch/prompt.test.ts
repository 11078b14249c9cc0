/**
 * A batch job's `prompt`, and its key's vocabulary as it was at submission,
 * bias every piece the built-in engine decodes (issue 37): the terms corpus
 * clip comes back with its names only when the job says them.
 */
import { expect } from 'chai';
import request from 'supertest';
import { pcmToWav } from '../../shared/audio/index.js';
import { termsClip } from '../audio/corpus/terms.js';
import { batchSuite, issueKey, waitFor } from './helpers.js';

describe('batch jobs take the prompt and the key vocabulary (issue 37)', function () {
  this.timeout(300_000);
  const s = batchSuite({
    prefix: 'prompt',
    write: () => ({ 'k8s.wav': pcmToWav(termsClip('00-0-flite-slt-clean.flac').pcm) }),
    run: 'workers',
  });

  async function jobText(key: string, prompt?: string): Promise<string> {
    const sub = await request(s.t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: `${s.files.url}/k8s.wav`, ...(prompt ? { prompt } : {}) })
      .expect(202);
    const done = await waitFor(async () => {
      const res = await request(s.t.server)
        .get(`/v1/audio/transcriptions/jobs/${sub.body.workflow_id}`)
        .set('authorization', `Bearer ${key}`);
      return res.body.status === 'complete' || res.body.status === 'errored' ? res : undefined;
    }, 240_000);
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
    return done.body.output.result.text as string;
  }

  it('the prompt and the vocabulary each bring the names; neither: the general model alone', async () => {
    const { key } = await issueKey(s.t, { plan: 'pro' });
    expect(await jobText(key)).not.to.match(/kubernetes|grafana/i);
    expect(await jobText(key, 'Kubernetes, Grafana')).to.include('Kubernetes');
    await request(s.t.server)
      .put('/v1/vocabulary')
      .set('authorization', `Bearer ${key}`)
      .send({ words: [{ word: 'Kubernetes' }, { word: 'Grafana' }] })
      .expect(200);
    expect(await jobText(key)).to.include('Kubernetes');
  });
});
