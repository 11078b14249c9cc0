/**
 * No request can hold the event loop: a job with review and the worst
 * metadata the API accepts (1000 distinct terms, each close to the spoken
 * words so every n-gram has many candidates, 64 KiB) runs while the API's
 * event-loop delay is watched with perf_hooks.monitorEventLoopDelay.
 * Before the fix one such job held the loop for 12-79 s.
 */
import fs from 'node:fs';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { expect } from 'chai';
import request from 'supertest';
import { annotateChunkOffline } from '../../api/batch/review.js';
import type { ChunkCheckpoint } from '../../api/batch/types.js';
import {
  buildRecording,
  createBatchTestApp,
  issueKey,
  REFS,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from '../batch/helpers.js';

const CLIPS = [
  'jfk.wav',
  'librispeech-1221-135766-0001.wav',
  'librivox-austen-0870.wav',
  'librispeech-1089-134686-0001.wav',
];

/** `count` distinct near-misses of the words spoken (one letter changed, pairs and triples too). */
function hostileTerms(count: number): string[] {
  const words = CLIPS.flatMap((c) => REFS[c].split(' ')).filter((w) => w.length >= 3);
  const terms = new Set<string>();
  const letters = 'bcdfgklmnprstvz';
  for (let i = 0; terms.size < count; i++) {
    const n = 1 + (i % 3);
    const start = (i * 7) % (words.length - n);
    const gram = words.slice(start, start + n).join(' ');
    const at = (i * 13) % gram.length;
    const mutated = gram.slice(0, at) + letters[i % letters.length] + gram.slice(at + 1);
    if (mutated.replace(/\s/g, '').length >= 4)
      terms.add(mutated + (terms.has(mutated) ? letters[(i >> 4) % 15] : ''));
  }
  return [...terms].slice(0, count);
}

describe('faults: the event loop under the worst allowed review input', function () {
  this.timeout(240_000);
  let t: BatchTestApp;
  let files: FileServer;
  let key: string;
  const dir = tmpDir('faults-loop-');

  before(async () => {
    buildRecording(path.join(dir, 'talk.wav'), CLIPS.slice(0, 1), 0.6);
    buildRecording(path.join(dir, 'warm.wav'), ['librivox-austen-0880.wav'], 0.6);
    files = await startFileServer(dir);
    t = await createBatchTestApp({}, { start: true });
    key = (await issueKey(t, { plan: 'pro' })).key;
  });
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('offline review of a long chunk against 1000 terms is near-linear (sub-second, not minutes)', () => {
    // 3000 words (about 20 minutes of speech) in one chunk.
    const spoken = CLIPS.flatMap((c) => REFS[c].split(' '));
    const words = Array.from({ length: 3000 }, (_, i) => ({
      word: spoken[i % spoken.length],
      start: i * 0.4,
      end: i * 0.4 + 0.3,
      confidence: 0.9,
    }));
    const chunk = {
      index: 0,
      start: 0,
      end: 1200,
      words,
      text: '',
      segments: [],
    } as unknown as ChunkCheckpoint;
    const started = performance.now();
    const review = annotateChunkOffline(chunk, { known_terms: hostileTerms(1000) }, 0.5);
    const ms = performance.now() - started;
    expect(review.issues.length).to.be.greaterThan(0);
    // Generous: the quadratic version took minutes here; this takes well under a second on an idle machine.
    expect(ms).to.be.lessThan(20_000);
  });

  /** Submits a job and waits for its end; returns the final poll body. */
  async function runJob(body: Record<string, unknown>): Promise<Record<string, any>> {
    const res = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send(body);
    expect(res.status, res.text).to.equal(202);
    const id = res.body.workflow_id as string;
    let last: unknown;
    return waitFor(
      async () => {
        const p = await request(t.server)
          .get(`/v1/audio/transcriptions/jobs/${id}`)
          .set('authorization', `Bearer ${key}`);
        last = p.body;
        return p.body.status === 'complete' || p.body.status === 'errored' ? p.body : undefined;
      },
      200_000,
      50,
    ).catch((err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(last)}`);
    });
  }

  it('a job with review and 1000 hostile terms never delays the API event loop by 100 ms or more', async () => {
    // Warm-up: the first job loads the speech models and compiles what it needs; that is not input-proportional.
    expect((await runJob({ audio_url: `${files.url}/warm.wav`, review: true })).status).to.equal('complete');
    const metadata = { known_terms: hostileTerms(1000) };
    expect(Buffer.byteLength(JSON.stringify(metadata))).to.be.lessThan(64 * 1024);
    // The delay is watched while the review (the work proportional to the terms) runs.
    const histogram = monitorEventLoopDelay({ resolution: 10 });
    const hooks = t.hooks;
    hooks.onStep = (_id, name, phase) => {
      if (name !== 'review') return;
      if (phase === 'start') histogram.enable();
      else histogram.disable();
    };
    // A loaded machine can deschedule any process for 100 ms now and then; a blocking review
    // holds the loop every time. So: up to three jobs, and one must stay below the bound.
    const maxima: number[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      histogram.reset();
      const done = await runJob({ audio_url: `${files.url}/talk.wav`, review: true, metadata });
      expect(done.status, JSON.stringify(done.error)).to.equal('complete');
      expect(done.output.review.issues).to.be.greaterThan(0);
      maxima.push(histogram.max / 1e6);
      if (maxima.at(-1)! < 100) break;
    }
    hooks.onStep = undefined;
    expect(
      Math.min(...maxima),
      `event-loop delay max per job: ${maxima.map((m) => m.toFixed(1)).join(', ')} ms`,
    ).to.be.lessThan(100);
  });
});
