/**
 * End to end on real Postgres, pg-boss, PocketSphinx and a loopback audio
 * server: submit → steps → output, artifacts, review, webhook, resubmission.
 */
import fs from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { Webhook } from 'standardwebhooks';
import { ajv } from '../../api/http/validate.js';
import { workflowStatusSchema } from '../../api/batch/schemas.js';
import { seriesValue } from '../helpers/metrics.js';
import { tenantStore } from '../../api/batch/storage/index.js';
import {
  audioDir,
  buildRecording,
  createBatchTestApp,
  durationOf,
  issueKey,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from './helpers.js';
import { clip, wer } from '../speech/helpers.js';

describe('batch: workflow end to end', function () {
  this.timeout(120_000);
  let t: BatchTestApp;
  let files: FileServer;
  let key: string;
  let otherKey: string;
  let duration: number;
  const dir = tmpDir('batch-audio-');

  before(async () => {
    // ~33 s: four clips with 0.8 s pauses between them.
    buildRecording(path.join(dir, 'talk.wav'), [
      'jfk.wav',
      'librivox-austen-0870.wav',
      'librivox-austen-0880.wav',
      'librivox-austen-0890.wav',
    ]);
    duration = durationOf(path.join(dir, 'talk.wav'));
    files = await startFileServer(dir);
    t = await createBatchTestApp(
      {
        PLANS_JSON: JSON.stringify({
          tiny: { maxAudioSecondsPerRequest: 5 },
          budget: { maxAudioSecondsPerWindow: 100 },
        }),
      },
      { start: true },
    );
    key = (await issueKey(t, { ownerId: 'tenant-a', plan: 'pro' })).key;
    otherKey = (await issueKey(t, { ownerId: 'tenant-b', plan: 'pro' })).key;
  });
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const poll = (id: string, k = key) =>
    request(t.server).get(`/v1/audio/transcriptions/jobs/${id}`).set('authorization', `Bearer ${k}`);

  async function waitDone(id: string) {
    return waitFor(
      async () => {
        const r = await poll(id);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      },
      90_000,
      200,
    );
  }

  const scrape = async () => (await request(t.server).get('/metrics').expect(200)).text;

  // Each case can run alone (mocha -g): the first job and its resubmission are fixtures,
  // started by whichever case needs them first and shared after that.
  interface FirstJob {
    requestId: string;
    workflowId: string;
    submitted: request.Response;
    metricsBefore: string;
  }
  /** talk.wav in 10 s chunks at concurrency 2, under `requestId`, with `extra` fields. */
  const submitTalk = (requestId: string, extra: Record<string, unknown> = {}) =>
    request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({
        audio_url: `${files.url}/talk.wav`,
        request_id: requestId,
        segment_seconds: 10,
        concurrency: 2,
        ...extra,
      });
  let firstJobRun: Promise<FirstJob> | undefined;
  const firstJob = () =>
    (firstJobRun ??= (async () => {
      const metricsBefore = await scrape();
      const requestId = randomId();
      const submitted = await submitTalk(requestId, {
        review: true,
        language: 'en-US',
        webhook_url: `${files.url}/hook`,
        metadata: { known_terms: ['Dashwood', 'Americans'], specialty: 'literature' },
      });
      expect(submitted.status, submitted.text).to.equal(202);
      return { requestId, workflowId: submitted.body.workflow_id, submitted, metricsBefore };
    })());
  /** The first job, finished: its poll body. */
  const firstJobDone = async () => (await waitDone((await firstJob()).workflowId)).body;
  let resubmissionRun:
    Promise<{ engineCalls: number; submitted: request.Response; done: request.Response }> | undefined;
  const resubmission = () =>
    (resubmissionRun ??= (async () => {
      const { requestId } = await firstJob();
      await firstJobDone();
      const engineCalls = t.engineCalls.length;
      const submitted = await submitTalk(requestId);
      return { engineCalls, submitted, done: await waitDone(submitted.body.workflow_id) };
    })());

  it('runs a job with review and webhook: steps, output, artifacts, signed webhook, /metrics', async () => {
    const { requestId, workflowId, submitted: sub, metricsBefore } = await firstJob();
    expect(sub.body).to.include({ request_id: requestId, status: 'queued' });
    expect(sub.body.workflow_id).to.match(/^cf_[0-9a-f]{64}$/);
    expect(sub.body.endpoint).to.equal(`GET /${sub.body.workflow_id}`);
    expect(sub.body.poll_endpoint).to.equal(`GET /v1/audio/transcriptions/jobs/${sub.body.workflow_id}`);

    // Steps become visible while it runs: a poll sees the job running with a step in progress and others done.
    const running = await waitFor(
      async () => {
        const r = await poll(workflowId);
        const st = (r.body.steps as { status: string }[]).map((x) => x.status);
        return r.body.status === 'running' && st.includes('running') && st.includes('complete')
          ? r
          : undefined;
      },
      30_000,
      25,
    );
    expect(running.body.output ?? null).to.equal(null);
    expect(running.body.steps[0]).to.include({ name: 'probe', status: 'complete', attempts: 1 });

    const done = await waitDone(workflowId);
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
    expect(done.body.error).to.equal(null);
    // The whole status object has the shape of 2.3 / 2.4 (the schema /openapi.json publishes).
    const validStatus = ajv.compile(workflowStatusSchema);
    expect(validStatus(done.body), ajv.errorsText(validStatus.errors)).to.equal(true);
    // Fields in the order the interface shows them (2.3, 2.4); the project's extras after them.
    expect(Object.keys(done.body)).to.deep.equal([
      'workflow_id',
      'status',
      'steps',
      'output',
      'error',
      'request_id',
    ]);
    const res = done.body.output.result;
    expect(Object.keys(res)).to.deep.equal(['segments', 'summary', 'metadata', 'text']);
    expect(Object.keys(res.segments[0])).to.deep.equal([
      'id',
      'start_time',
      'end_time',
      'duration',
      'text',
      'confidence',
    ]);
    expect(Object.keys(res.summary)).to.deep.equal([
      'total_duration',
      'total_speech_duration',
      'overall_speech_ratio',
      'num_segments',
    ]);
    expect(Object.keys(res.metadata)).to.deep.equal([
      'language',
      'model',
      'chunk_count',
      'audio_duration_seconds',
    ]);
    expect(done.body.output.result.metadata.language).to.equal('en');
    const names = done.body.steps.map((s: { name: string }) => s.name);
    expect(names.slice(0, 2)).to.deep.equal(['probe', 'slice']);
    expect(names).to.include.members([
      'transcribe_chunk_0',
      'transcribe_chunk_1',
      'transcribe_chunk_2',
      'aggregate',
      'review',
      'report',
    ]);
    for (const s of done.body.steps) {
      expect(s).to.have.all.keys('name', 'status', 'started_at', 'ended_at', 'attempts');
      // ISO 8601 in UTC with milliseconds, exactly as Date#toISOString writes it.
      for (const t of [s.started_at, s.ended_at])
        if (t !== null) expect(new Date(t).toISOString()).to.equal(t);
    }
    // concurrency 2: the first two chunks were in flight together.
    const step = (n: string) => done.body.steps.find((s: { name: string }) => s.name === n);
    const [c0, c1] = [step('transcribe_chunk_0'), step('transcribe_chunk_1')];
    expect(new Date(c1.started_at).getTime()).to.be.below(new Date(c0.ended_at).getTime());
    expect(new Date(c0.started_at).getTime()).to.be.below(new Date(c1.ended_at).getTime());
    const out = done.body.output;
    expect(out).to.have.keys('probe', 'slice', 'chunks', 'aggregate', 'review', 'report', 'result');
    expect(out.probe.duration_seconds).to.be.closeTo(duration, 0.05);
    expect(out.slice.slices).to.have.length(3);
    // Cuts land in the inserted pauses (quiet), not inside words.
    for (const c of out.slice.cuts) expect(c.level_db).to.be.below(-50);
    const r = out.result;
    expect(r.metadata).to.include({ chunk_count: 3 });
    expect(r.metadata.audio_duration_seconds).to.be.closeTo(duration, 0.05);
    expect(r.summary.num_segments).to.equal(r.segments.length);
    expect(r.summary.total_duration).to.be.closeTo(duration, 0.05);
    expect(r.summary.overall_speech_ratio).to.be.within(0, 1);
    let prevEnd = 0;
    r.segments.forEach(
      (s: { id: number; start_time: number; end_time: number; duration: number }, i: number) => {
        expect(s.id).to.equal(i);
        expect(s.start_time).to.be.at.least(prevEnd - 0.01);
        expect(s.duration).to.be.closeTo(s.end_time - s.start_time, 0.002);
        prevEnd = s.end_time;
      },
    );
    const text = r.segments
      .map((s: { text: string }) => s.text)
      .join(' ')
      .toLowerCase();
    expect(text).to.match(/country/);
    expect(text, text).to.match(/dashwood|disposed|selfish/);
    expect(t.engineCalls.filter((c) => c.workflowId === workflowId)).to.have.length(3);

    // Artifacts (2.5): exactly the table's keys for a reviewed job, read through GET /r2/{key}, owner only.
    const stored = (
      await tenantStore(t.runtime.store, 'tenant-a').list(`transcription/${requestId}/`)
    ).sort();
    expect(stored).to.deep.equal(
      [
        'chunk_0',
        'chunk_1',
        'chunk_2',
        'result',
        'review_chunk_0',
        'review_chunk_1',
        'review_chunk_2',
        'reviewed_result',
      ]
        .map((k) => `transcription/${requestId}/${k}.json`)
        .sort(),
    );
    for (const k of [
      'chunk_0.json',
      'chunk_2.json',
      'result.json',
      'review_chunk_1.json',
      'reviewed_result.json',
    ]) {
      const a = await request(t.server)
        .get(`/r2/transcription/${requestId}/${k}`)
        .set('authorization', `Bearer ${key}`);
      expect(a.status, k).to.equal(200);
    }
    const reviewed = await request(t.server)
      .get(`/r2/transcription/${requestId}/reviewed_result.json`)
      .set('authorization', `Bearer ${key}`);
    expect(reviewed.body).to.have.property('changes').that.is.an('array');
    expect(reviewed.body.segments).to.have.length(r.segments.length);
    const other = await request(t.server)
      .get(`/r2/transcription/${requestId}/result.json`)
      .set('authorization', `Bearer ${otherKey}`);
    expect(other.status).to.equal(404);
    expect(other.body).to.have.property('error').that.is.a('string');

    // Webhook: Standard Webhooks signature over the raw body, raw and reviewed results.
    const hook = await waitFor(async () => files.posts.find((p) => p.path === '/hook'));
    const { secret } = (
      await request(t.server).get('/v1/webhooks/secret').set('authorization', `Bearer ${key}`)
    ).body as { secret: string };
    const verified = new Webhook(secret).verify(hook.body, hook.headers as Record<string, string>) as {
      type: string;
      data: { workflow_id: string; result: unknown; reviewed_result: { changes: unknown[] } };
    };
    expect(verified.type).to.equal('transcription.completed');
    expect(verified.data.workflow_id).to.equal(workflowId);
    expect(verified.data.result).to.deep.equal(r);
    expect(verified.data.reviewed_result.changes).to.be.an('array');
    expect(hook.headers['webhook-id']).to.equal(`msg_${workflowId}`);
    const deliveries = await waitFor(async () => {
      const rows = await t.deps.db('batch_webhook_deliveries').where({ workflow_id: workflowId });
      return rows.length ? rows : undefined;
    });
    expect(deliveries[0]).to.include({ outcome: 'delivered', status_code: 200, attempt: 1 });

    // The delivery counter moves once the delivery has been recorded: wait for it.
    const delivered = (m: string) =>
      seriesValue(m, 'stt_batch_webhook_attempts_total', { outcome: 'delivered' });
    const metricsAfter = await waitFor(async () => {
      const m = await scrape();
      return delivered(m) > delivered(metricsBefore) ? m : undefined;
    });
    const delta = (name: string, labels: Record<string, string> = {}) =>
      seriesValue(metricsAfter, name, labels) - seriesValue(metricsBefore, name, labels);
    expect(delta('stt_batch_workflows_submitted_total')).to.equal(1);
    expect(delta('stt_batch_workflows_finished_total', { status: 'complete' })).to.equal(1);
    const chunks = names.filter((n: string) => n.startsWith('transcribe_chunk_')).length;
    expect(
      delta('stt_batch_step_duration_seconds_count', { step: 'transcribe_chunk', status: 'complete' }),
    ).to.equal(chunks);
    expect(delta('stt_batch_step_duration_seconds_count', { step: 'probe', status: 'complete' })).to.equal(1);
    expect(delta('stt_batch_webhook_attempts_total', { outcome: 'delivered' })).to.equal(1);
    expect(delta('stt_billed_audio_seconds_total', { plane: 'batch' })).to.be.greaterThan(0);
    expect(seriesValue(metricsAfter, 'stt_batch_runs_active')).to.equal(0);
  });

  it('polls on all three paths; other tenants and unknown ids get 404', async () => {
    const { workflowId } = await firstJob();
    for (const p of [
      `/v1/audio/transcriptions/jobs/${workflowId}`,
      `/v1/audio/transcriptions/${workflowId}`,
      `/${workflowId}`,
    ]) {
      const r = await request(t.server).get(p).set('authorization', `Bearer ${key}`);
      expect(r.status, p).to.equal(200);
      expect(r.body.workflow_id).to.equal(workflowId);
      const o = await request(t.server).get(p).set('authorization', `Bearer ${otherKey}`);
      expect(o.status, p).to.equal(404);
      expect(o.body.error).to.be.a('string');
    }
    const unknown = `cf_${'0'.repeat(64)}`;
    for (const p of [
      `/v1/audio/transcriptions/jobs/${unknown}`,
      `/v1/audio/transcriptions/${unknown}`,
      `/${unknown}`,
    ]) {
      const r = await request(t.server).get(p).set('authorization', `Bearer ${key}`);
      expect(r.status, p).to.equal(404);
    }
    const noAuth = await request(t.server).get(`/${workflowId}`);
    expect(noAuth.status).to.equal(401);
  });

  it('resubmitting the same request_id skips every stored chunk', async () => {
    const { requestId, workflowId } = await firstJob();
    const firstResult = (await firstJobDone()).output.result as { segments: { text: string }[] };
    const { engineCalls: before, submitted: sub, done } = await resubmission();
    expect(sub.status).to.equal(202);
    expect(sub.body.workflow_id).to.not.equal(workflowId);
    expect(done.body.status).to.equal('complete');
    expect(t.engineCalls.length).to.equal(before);
    expect(done.body.output.report).to.include({ chunks_reused: 3, chunks_transcribed: 0 });
    // Without review this time: the first run's review files are gone, the prefix holds this run's table.
    const stored = (
      await tenantStore(t.runtime.store, 'tenant-a').list(`transcription/${requestId}/`)
    ).sort();
    expect(stored).to.deep.equal(
      ['chunk_0', 'chunk_1', 'chunk_2', 'result'].map((k) => `transcription/${requestId}/${k}.json`),
    );
    expect(done.body.output.report.artifacts).to.have.members(stored);
    expect(done.body.output.result.segments.map((s: { text: string }) => s.text)).to.deep.equal(
      firstResult.segments.map((s) => s.text),
    );
  });

  it('a single chunk at concurrency 2 keeps both decoders busy: its utterances go to the engine in parallel', async () => {
    // Observe the real engine's calls (pass-through): how many are in flight at once.
    const speech = t.deps.speech!;
    const transcribe = speech.transcribe;
    let inFlight = 0;
    let most = 0;
    speech.transcribe = async (req) => {
      most = Math.max(most, ++inFlight);
      try {
        return await transcribe.call(speech, req);
      } finally {
        inFlight--;
      }
    };
    try {
      const sub = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `${files.url}/talk.wav`, segment_seconds: 100, concurrency: 2 });
      const done = await waitDone(sub.body.workflow_id);
      expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
      expect(done.body.output.report).to.include({ chunk_count: 1, concurrency: 2 });
      expect(most).to.equal(2);
      const text = done.body.output.result.text.toLowerCase();
      expect(text).to.match(/country/);
      // The utterances are put back in order.
      expect(text.indexOf('country')).to.be.below(text.search(/dashwood|disposed|selfish|norland|estate/));
    } finally {
      speech.transcribe = transcribe;
    }
  });

  it('errors a job whose audio cannot be fetched, with error {name, message} and no output', async () => {
    const freeKey = (await issueKey(t, { ownerId: 'tenant-c', plan: 'free' })).key;
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${freeKey}`)
      .send({ audio_url: `${files.url}/missing.wav` });
    expect(sub.status).to.equal(202);
    const done = await waitFor(async () => {
      const r = await poll(sub.body.workflow_id, freeKey);
      return r.body.status === 'errored' ? r : undefined;
    }, 30_000);
    expect(done.body.error.name).to.equal('AudioFetchError');
    expect(done.body.error.message).to.match(/404/);
    expect(done.body).to.not.have.property('output');
  });

  it('errors a job whose audio is longer than the plan allows per request', async () => {
    const tinyKey = (await issueKey(t, { ownerId: 'tenant-tiny', plan: 'tiny' })).key;
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${tinyKey}`)
      .send({ audio_url: `${files.url}/talk.wav` });
    const done = await waitFor(async () => {
      const r = await poll(sub.body.workflow_id, tinyKey);
      return r.body.status === 'errored' ? r : undefined;
    }, 30_000);
    expect(done.body.error).to.deep.equal({
      name: 'AudioTooLongError',
      message: 'The audio is longer than the plan allows per request (5 s).',
    });
    const probe = done.body.steps.find((s: { name: string }) => s.name === 'probe');
    expect(probe.status).to.equal('errored');
  });

  it('errors a job that would exceed the plan audio budget of the billing window', async () => {
    const budget = await issueKey(t, { ownerId: 'tenant-budget', plan: 'budget' });
    await t.deps
      .db('usage_events')
      .insert({ key_id: budget.id, plane: 'segment', ref_id: randomId('usage'), audio_seconds: 90 });
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${budget.key}`)
      .send({ audio_url: `${files.url}/talk.wav` });
    const done = await waitFor(async () => {
      const r = await poll(sub.body.workflow_id, budget.key);
      return r.body.status === 'errored' ? r : undefined;
    }, 30_000);
    expect(done.body.error.name).to.equal('AudioQuotaExceededError');
  });

  it('bills each workflow once, for the audio it had transcribed (reused checkpoints are free)', async () => {
    const { workflowId } = await firstJob();
    const { done } = await resubmission();
    const row = await t.deps.db('usage_events').where({ plane: 'batch', ref_id: workflowId }).first();
    expect(row.audio_seconds).to.be.closeTo(duration, 0.05);
    const resubmitted = await t.deps
      .db('usage_events')
      .where({ plane: 'batch', ref_id: done.body.workflow_id })
      .first();
    expect(resubmitted.audio_seconds).to.equal(0);
  });

  it('loses no words to cutting: jfk.wav through a batch job is within 5 WER points of the segment endpoint', async () => {
    // jfk.wav has pauses of ~0.5-1 s between its phrases; decoded one phrase at a time
    // PocketSphinx's per-call normalisation had too little audio (50% WER against 23% whole).
    fs.copyFileSync(path.join(audioDir, 'jfk.wav'), path.join(dir, 'jfk.wav'));
    const { reference } = clip('jfk.wav');
    const segment = await request(t.server)
      .post('/v1/audio/transcriptions')
      .set('authorization', `Bearer ${key}`)
      .attach('file', path.join(audioDir, 'jfk.wav'), 'jfk.wav')
      .field('response_format', 'json')
      .field('language', 'en')
      .expect(200);
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: `${files.url}/jfk.wav`, language: 'en' })
      .expect(202);
    const done = await waitDone(sub.body.workflow_id);
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
    const batchWer = wer(reference, done.body.output.result.text);
    const segmentWer = wer(reference, segment.body.text);
    expect(
      batchWer,
      `batch "${done.body.output.result.text}" vs segment "${segment.body.text}"`,
    ).to.be.at.most(segmentWer + 0.05);
  });
});

describe('batch: review through a remote OpenAI-compatible reviewer', function () {
  this.timeout(120_000);
  let t: BatchTestApp;
  let files: FileServer;
  let reviewer: http.Server;
  const calls: string[] = [];
  const dir = tmpDir('batch-review-');

  before(async () => {
    fs.copyFileSync(path.join(audioDir, 'librivox-austen-0880.wav'), path.join(dir, 'a.wav'));
    files = await startFileServer(dir);
    // A stand-in for a hosted chat-completions API (a third party that cannot run here):
    // stage one answers, stage two fails, so the workflow must fall back to the offline correction.
    reviewer = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const system = JSON.parse(body).messages[0].content as string;
        const stage = system.includes('one chunk') ? 'annotate' : 'correct';
        calls.push(stage);
        if (stage === 'correct') {
          res.statusCode = 500;
          return void res.end('{"error":{"message":"overloaded"}}');
        }
        const issues = [{ text: 'norland', suggestion: 'Norland', why: 'place name' }];
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            choices: [{ message: { role: 'assistant', content: JSON.stringify({ issues }) } }],
          }),
        );
      });
    });
    await new Promise<void>((r) => reviewer.listen(0, '127.0.0.1', r));
    const port = (reviewer.address() as net.AddressInfo).port;
    t = await createBatchTestApp(
      { REVIEW_API_URL: `http://127.0.0.1:${port}/v1`, REVIEW_MODEL: 'stand-in' },
      { start: true },
    );
  });
  after(async () => {
    await t?.close();
    await files?.close();
    reviewer?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('uses the reviewer where it answers and the offline stage where it fails; the job completes', async () => {
    const { key } = await issueKey(t, { ownerId: 'tenant-review', plan: 'pro' });
    const requestId = randomId();
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({
        audio_url: `${files.url}/a.wav`,
        request_id: requestId,
        review: true,
        metadata: { known_terms: ['Norland'] },
      });
    expect(sub.status).to.equal(202);
    const done = await waitFor(
      async () => {
        const r = await request(t.server)
          .get(`/v1/audio/transcriptions/jobs/${sub.body.workflow_id}`)
          .set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      },
      90_000,
      200,
    );
    expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
    expect(done.body.output.review.reviewer).to.deep.equal({ annotate: 'llm:stand-in', correct: 'offline' });
    expect(calls).to.deep.equal(['annotate', 'correct']);
    const annotated = await request(t.server)
      .get(`/r2/transcription/${requestId}/review_chunk_0.json`)
      .set('authorization', `Bearer ${key}`);
    expect(annotated.body).to.include({ reviewer: 'llm:stand-in' });
    expect(annotated.body.issues[0]).to.include({ suggestion: 'Norland' });
    const reviewed = await request(t.server)
      .get(`/r2/transcription/${requestId}/reviewed_result.json`)
      .set('authorization', `Bearer ${key}`);
    expect(reviewed.body.reviewer).to.deep.equal({ annotate: 'llm:stand-in', correct: 'offline' });
    expect(reviewed.body.changes).to.be.an('array');
  });
});
