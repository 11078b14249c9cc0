/** The slicer (cuts inside pauses) and the offline and remote review stages. */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import {
  energyEnvelope,
  energyEnvelopeOfFile,
  FRAME_SECONDS,
  planSlices,
  splitUtterances,
} from '../../shared/audio/slicing.js';
import { RemoteReviewer } from '../../api/batch/review/llm.js';
import { annotateChunkOffline, correctOffline } from '../../api/batch/review/offline.js';
import { levenshtein, phoneticKey } from '../../api/batch/review/text.js';
import { ByteBudget, Semaphore } from '../../shared/semaphore.js';
import { aggregate } from '../../api/batch/steps/aggregate.js';
import type { ChunkCheckpoint } from '../../api/batch/types.js';
import { batchConfig } from '../../shared/config/batch.js';
import { audioDir, buildRecording, tmpDir } from './helpers.js';
import { canonicalWavSamples } from '../../shared/audio/index.js';
import { ChannelSignatures } from '../../shared/audio/channel.js';
import { utterancePieces } from '../../api/batch/pieces.js';
import { pcmOf } from '../speech/helpers.js';
import { corpusPcm, loadCorpus } from '../speech/corpus.js';

/** Envelope of `seconds` of loud audio with quiet gaps [start, end). */
function synthetic(seconds: number, gaps: [number, number][]): Float32Array {
  const env = new Float32Array(Math.round(seconds / FRAME_SECONDS));
  for (let f = 0; f < env.length; f++) {
    const t = f * FRAME_SECONDS;
    // Speech with short syllable dips that must not attract a cut.
    env[f] = gaps.some(([a, b]) => t >= a && t < b) ? -80 : f % 25 < 2 ? -45 : -20;
  }
  return env;
}

describe('batch: slicing at pauses', () => {
  it('moves each boundary into the nearest real pause, not a syllable dip', () => {
    const env = synthetic(60, [
      [9.0, 9.6],
      [21.5, 22.1],
      [29.0, 29.5],
      [41.0, 41.6],
    ]);
    const plan = planSlices(env, 60, { segmentSeconds: 20, maxSearchSeconds: 5 });
    expect(plan.slices).to.have.length(3);
    const cuts = plan.cuts.map((c) => c.cut);
    expect(cuts[0]).to.be.within(21.5, 22.1);
    expect(cuts[1]).to.be.within(41.0, 41.6);
    expect(plan.slices[0].start).to.equal(0);
    expect(plan.slices[2].end).to.equal(60);
    for (let i = 1; i < plan.slices.length; i++)
      expect(plan.slices[i].start).to.equal(plan.slices[i - 1].end);
  });

  it('keeps chunks about segment_seconds long and never tiny', () => {
    const env = synthetic(95, []);
    const plan = planSlices(env, 95, { segmentSeconds: 30, maxSearchSeconds: 10 });
    expect(plan.slices).to.have.length(3);
    for (const s of plan.slices) expect(s.end - s.start).to.be.within(22, 40);
    expect(planSlices(env, 95, { segmentSeconds: 300, maxSearchSeconds: 10 }).slices).to.have.length(1);
  });

  it('refuses a segment length that is not a finite positive number instead of cutting forever (issue 41)', () => {
    const env = synthetic(95, []);
    // A workflow stored before the schema bounded the field kept `null` (JSON of Infinity).
    for (const bad of [Infinity, null, NaN, 0, -1, 1e-9])
      expect(
        () => planSlices(env, 95, { segmentSeconds: bad as number, maxSearchSeconds: 10 }),
        String(bad),
      ).to.throw(RangeError);
  });

  it('splits a chunk into utterances at its pauses and drops silent stretches', () => {
    const env = synthetic(20, [
      [0, 1],
      [6, 6.8],
      [12, 20],
    ]);
    const u = splitUtterances(env, 20, { minPauseSeconds: 0.4, maxUtteranceSeconds: 30 });
    expect(u).to.have.length(2);
    expect(u[0].start).to.equal(0);
    expect(u[0].end).to.be.within(6, 6.8);
    expect(u[1].start).to.equal(u[0].end);
    expect(u[1].end).to.be.within(12, 20);
    const long = splitUtterances(synthetic(70, []), 70, { minPauseSeconds: 0.4, maxUtteranceSeconds: 30 });
    expect(long.length).to.equal(2);
  });

  it('a pause ends a piece only once the piece is minUtteranceSeconds long', () => {
    const env = synthetic(20, [
      [0, 1],
      [6, 6.8],
      [12, 20],
    ]);
    const opts = { minPauseSeconds: 0.4, maxUtteranceSeconds: 30 };
    expect(splitUtterances(env, 20, { ...opts, minUtteranceSeconds: 5 })).to.have.length(2);
    const merged = splitUtterances(env, 20, { ...opts, minUtteranceSeconds: 8 });
    expect(merged).to.have.length(1);
    expect(merged[0]).to.include({ start: 0, end: 20 });
  });

  it('tells one voice from another by its spectral shape (what CMN would subtract)', async () => {
    const sig = async (f: string) => {
      const pcm = pcmOf(path.join(audioDir, f));
      return { s: await ChannelSignatures.of(pcm), d: pcm.length / 32000 };
    };
    const halves = async (f: string) => {
      const { s, d } = await sig(f);
      return s.distance([0, d / 2], [d / 2, d])!;
    };
    // The two halves of one recording: the same.
    for (const f of ['librispeech-1221-135766-0001.wav', 'librispeech-1089-134686-0001.wav', 'jfk.wav'])
      expect(await halves(f), f).to.be.below(batchConfig({}).utteranceSameChannelDb);
    // Recorded speakers side by side in one chunk: different.
    const dir = tmpDir('channel-');
    const order = ['jfk.wav', 'librispeech-1089-134686-0001.wav', 'librispeech-1221-135766-0001.wav'];
    const pcm = pcmOf(buildRecording(path.join(dir, 'm.wav'), order, 0.7));
    const s = await ChannelSignatures.of(pcm);
    let at = 0;
    const spans = order.map((f) => {
      const d = pcmOf(path.join(audioDir, f)).length / 32000;
      const span: [number, number] = [at, at + d];
      at += d + 0.7;
      return span;
    });
    expect(s.distance(spans[0], spans[1])).to.be.above(6);
    expect(s.distance(spans[1], spans[2])).to.be.above(6);
    expect(s.distance([0, 0.1], spans[1]), 'too short to tell').to.equal(null);
  });

  it('joins phrases of one voice into pieces of utteranceJoinSeconds, and never across a change of speaker', async () => {
    const config = batchConfig({});
    // A long-form file of one synthetic voice: its phrases join into pieces of 10 s or more.
    const long = loadCorpus('long').find((c) => c.voice.includes('rms'))!;
    const oneVoice = corpusPcm(long).subarray(0, 120 * 32000);
    const joined = await utterancePieces(oneVoice, config);
    const unjoined = await utterancePieces(oneVoice, { ...config, utteranceJoinSeconds: 0 });
    expect(unjoined.length).to.be.above(joined.length * 1.4);
    for (const p of joined.slice(0, -1))
      expect(p.end - p.start).to.be.at.least(config.utteranceJoinSeconds - 1.5);
    // Recorded speakers one after another, 0.7 s apart: every piece is one speaker's.
    const order = [
      'jfk.wav',
      'librispeech-1221-135766-0001.wav',
      'librispeech-1089-134686-0001.wav',
      'jfk.wav',
    ];
    const pcm = pcmOf(buildRecording(path.join(tmpDir('join-'), 'm.wav'), order, 0.7));
    const changes: number[] = [];
    let at = 0;
    for (const f of order.slice(0, -1)) {
      at += pcmOf(path.join(audioDir, f)).length / 32000 + 0.35;
      changes.push(at);
      at += 0.35;
    }
    const pieces = await utterancePieces(pcm, config);
    for (const p of pieces)
      for (const c of changes)
        expect(c > p.start + 0.5 && c < p.end - 0.5, `${p.start}-${p.end} spans ${c}`).to.equal(false);
  });

  it('on real speech, cuts fall in the pauses between clips', async () => {
    const dir = tmpDir('slice-');
    const wav = buildRecording(
      path.join(dir, 'r.wav'),
      ['librivox-austen-0870.wav', 'librivox-austen-0880.wav', 'librispeech-1089-134686-0001.wav'],
      0.6,
    );
    const pcm = canonicalWavSamples(fs.readFileSync(wav))!;
    const env = energyEnvelope(pcm);
    const pcmFile = path.join(dir, 'r.pcm');
    fs.writeFileSync(pcmFile, pcm);
    const streamed = await energyEnvelopeOfFile(pcmFile);
    expect(streamed.envelope.length).to.equal(env.length);
    expect(streamed.samples).to.equal(pcm.length / 2);
    const duration = pcm.length / 2 / 16000;
    // Ideal boundaries at ~1/3 and 2/3 fall inside speech; pauses are at 7.1–7.7 and 10.69–11.29.
    const plan = planSlices(env, duration, { segmentSeconds: duration / 3, maxSearchSeconds: 3 });
    const pauses: [number, number][] = [
      [7.1, 7.7],
      [10.69, 11.29],
    ];
    for (const c of plan.cuts) {
      expect(
        pauses.some(([a, b]) => c.cut >= a - 0.05 && c.cut <= b + 0.05),
        `cut ${c.cut}`,
      ).to.equal(true);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

function chunk(index: number, start: number, words: [string, number][]): ChunkCheckpoint {
  const ws = words.map(([word, confidence], i) => ({ word, start: i * 0.5, end: i * 0.5 + 0.4, confidence }));
  return {
    index,
    start,
    end: start + words.length * 0.5,
    audio_sha256: 'x',
    segment_seconds: 10,
    text: words.map((w) => w[0]).join(' '),
    language: 'en',
    model: 'm',
    segments: [
      { start: 0, end: words.length * 0.5, text: words.map((w) => w[0]).join(' '), confidence: 0.8 },
    ],
    words: ws,
    engine_ms: 1,
    worker_id: 'w',
    created_at: '',
  };
}

describe('batch: review', () => {
  const metadata = {
    known_terms: ['Dashwood', 'Norland Park'],
    speaker_roles: { narrator: 'Elinor' },
    specialty: 'literature',
  };
  const chunks = [
    chunk(0, 0, [
      ['mister', 0.9],
      ['john', 0.9],
      ['dash', 0.6],
      ['wood', 0.7],
      ['had', 0.9],
      ['leisure', 0.3],
    ]),
    chunk(1, 3, [
      ['at', 0.9],
      ['norland', 0.9],
      ['park', 0.9],
      ['with', 0.9],
      ['dash', 0.8],
      ['wood', 0.8],
      ['and', 0.9],
      ['ellen', 0.8],
      ['or', 0.8],
    ]),
  ];

  it('edit distance and phonetic keys', () => {
    expect(levenshtein('dashwod', 'dashwood')).to.equal(1);
    expect(phoneticKey('dashwood')).to.equal(phoneticKey('dashwud'));
    expect(phoneticKey('philip')).to.equal(phoneticKey('filip'));
  });

  it('stage one flags near-misses of metadata terms and low-confidence words per chunk', () => {
    const r0 = annotateChunkOffline(chunks[0], metadata, 0.5);
    expect(r0.chunk_index).to.equal(0);
    const near = r0.issues.find((i) => i.type === 'term_near_miss')!;
    expect(near).to.include({ text: 'dash wood', suggestion: 'Dashwood' });
    expect(near.start_time).to.equal(1);
    expect(r0.issues.find((i) => i.type === 'low_confidence')).to.include({ text: 'leisure' });
    const r1 = annotateChunkOffline(chunks[1], metadata, 0.5);
    expect(r1.issues.map((i) => i.suggestion)).to.include.members(['Dashwood', 'Elinor']);
    // Correct terms are not flagged.
    expect(r1.issues.some((i) => /norland/i.test(i.text))).to.equal(false);
  });

  it('stage two corrects consistently across the transcript with a change log', () => {
    const reviews = chunks.map((c) => annotateChunkOffline(c, metadata, 0.5));
    const result = aggregate(chunks, { language: 'en' }, 8, 'm');
    const { result: fixed, changes } = correctOffline(result, reviews);
    expect(fixed.segments[0].text).to.equal('mister john Dashwood had leisure');
    expect(fixed.segments[1].text).to.equal('at norland park with Dashwood and Elinor');
    expect(changes).to.have.length(3);
    for (const c of changes) {
      expect(c).to.have.all.keys('before', 'after', 'where', 'why');
      expect(c.where).to.have.all.keys('segment_id', 'start_time', 'end_time');
    }
    expect(changes[0]).to.deep.include({ before: 'dash wood', after: 'Dashwood' });
  });

  it('stage two leaves weak near-misses of short terms alone (flagged, not changed)', () => {
    const c = chunk(0, 0, [
      ['part', 0.9],
      ['of', 0.9],
      ['the', 0.9],
      ['park', 0.9],
    ]);
    const meta = { known_terms: ['Pork'] };
    const review = annotateChunkOffline(c, meta, 0.5);
    expect(review.issues.find((i) => i.text === 'park')).to.include({ suggestion: 'Pork', distance: 1 });
    const { changes } = correctOffline(aggregate([c], { language: 'en' }, 2, 'm'), [review]);
    expect(changes).to.deep.equal([]);
  });

  it('a remote OpenAI-compatible reviewer can replace either stage', async () => {
    const seen: string[] = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        seen.push(`${req.method} ${req.url}`);
        const sys = JSON.parse(body).messages[0].content as string;
        const content = sys.includes('one chunk')
          ? { issues: [{ text: 'ellen or', suggestion: 'Elinor', why: 'speaker name' }] }
          : {
              segments: [{ id: 1, text: 'at Norland Park with Dashwood and Elinor' }],
              changes: [{ segment_id: 1, before: 'ellen or', after: 'Elinor', why: 'speaker name' }],
            };
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({ choices: [{ message: { role: 'assistant', content: JSON.stringify(content) } }] }),
        );
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const cfg = batchConfig({
      REVIEW_API_URL: `http://127.0.0.1:${port}/v1`,
      REVIEW_MODEL: 'test-model',
    }).review;
    const reviewer = new RemoteReviewer(cfg);
    expect(reviewer.enabledFor('annotate')).to.equal(true);
    const r1 = await reviewer.annotate(chunks[1], metadata);
    expect(r1.reviewer).to.equal('llm:test-model');
    expect(r1.issues[0]).to.include({ type: 'reviewer', suggestion: 'Elinor' });
    const result = aggregate(chunks, { language: 'en' }, 8, 'm');
    const out = await reviewer.correct(result, [r1], metadata);
    expect(out.result.segments[1].text).to.equal('at Norland Park with Dashwood and Elinor');
    expect(out.changes[0]).to.deep.include({ before: 'ellen or', after: 'Elinor' });
    expect(seen).to.deep.equal(['POST /v1/chat/completions', 'POST /v1/chat/completions']);
    server.close();
    expect(new RemoteReviewer(batchConfig({}).review).enabledFor('annotate')).to.equal(false);
  });
});

describe('batch: engine slots', () => {
  it('bounds calls in flight and lets aborted waiters go', async () => {
    const sem = new Semaphore(2);
    let inFlight = 0;
    let peak = 0;
    const job = () =>
      sem.run(undefined, async () => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        await new Promise((r) => setTimeout(r, 10));
        inFlight--;
      });
    await Promise.all(Array.from({ length: 7 }, job));
    expect(peak).to.equal(2);
    const hold = sem.run(undefined, () => new Promise((r) => setTimeout(r, 50)));
    const hold2 = sem.run(undefined, () => new Promise((r) => setTimeout(r, 50)));
    const ac = new AbortController();
    const waiting = sem.run(ac.signal, async () => 'ran');
    ac.abort(new Error('stop'));
    let err: unknown;
    await waiting.catch((e) => (err = e));
    expect((err as Error).message).to.equal('stop');
    await Promise.all([hold, hold2]);
    expect(await sem.run(undefined, async () => 'free again')).to.equal('free again');
  });
});

describe('batch: chunk memory budget', () => {
  it('holds at most its bytes at once, in order; a chunk larger than the budget runs alone; aborted waiters go', async () => {
    const budget = new ByteBudget(100);
    let held = 0;
    let peak = 0;
    const order: number[] = [];
    const chunk = (bytes: number, i: number) =>
      budget.run(bytes, undefined, async () => {
        held += bytes;
        peak = Math.max(peak, held);
        await new Promise((r) => setTimeout(r, 10));
        order.push(i);
        held -= bytes;
      });
    await Promise.all([chunk(60, 0), chunk(60, 1), chunk(30, 2), chunk(250, 3), chunk(10, 4)]);
    expect(order).to.deep.equal([0, 1, 2, 3, 4]);
    expect(peak, 'the 250-byte chunk alone').to.equal(250);
    const hold = budget.run(100, undefined, () => new Promise((r) => setTimeout(r, 30)));
    const ac = new AbortController();
    let err: unknown;
    const waiting = budget.run(10, ac.signal, async () => 'ran').catch((e) => (err = e));
    ac.abort(new Error('stop'));
    await waiting;
    expect((err as Error).message).to.equal('stop');
    await hold;
    expect(await budget.run(100, undefined, async () => 'free again')).to.equal('free again');
  });
});
