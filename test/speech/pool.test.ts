import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import OpenAI, { toFile } from 'openai';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { RemotePool } from '../../shared/stt/remote.js';
import { SpeechError } from '../../shared/stt/types.js';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import { REPO_ROOT, clip, pcmOf, startEngine, type EngineProcess } from './helpers.js';
import { startSpeechApp, type SpeechTestApp } from './app.js';
import { seriesValue } from '../helpers/metrics.js';

/**
 * Two real engine/ worker processes behind the remote pool. PocketSphinx
 * needs about a second per 3 s clip here, so the app under test runs with
 * a per-attempt timeout suited to it; the interface's 800 ms / 1.6 s default
 * is exercised separately.
 */
describe('speech: remote worker pool with two engine/ processes', function () {
  this.timeout(120_000);
  let a: EngineProcess;
  let b: EngineProcess;
  let t: SpeechTestApp;
  let key: string;
  const logger = createLogger({ level: 'silent' });
  const short = fs.readFileSync(clip('librivox-austen-0880.wav').path);

  const idle = async (e: EngineProcess) => {
    for (;;) {
      const h = (await (await fetch(`${e.url}/health`)).json()) as { busy: number; queued: number };
      if (h.busy === 0 && h.queued === 0) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  /** Waits until the worker reports a request being decoded. */
  const busy = async (e: EngineProcess) => {
    for (;;) {
      const h = (await (await fetch(`${e.url}/health`)).json()) as { busy: number };
      if (h.busy > 0) return;
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  before(async () => {
    [a, b] = await Promise.all([startEngine(), startEngine()]);
    t = await startSpeechApp(
      {
        STT_WORKER_URLS: `wa=${a.url},wb=${b.url}`,
        // Generous: on a loaded 2-core machine a 3 s clip can take several seconds to decode.
        STT_ATTEMPT_TIMEOUT_MS: '30000',
        STT_BUDGET_MS: '60000',
      },
      // A busy test machine must not make a live worker look dead.
      { overrides: { speech: { remote: { healthIntervalMs: 250, healthTimeoutMs: 10_000 } } } },
    );
    ({ key } = await t.issueKey('pro'));
    await (t.deps.speech as RemotePool).ready();
  });
  after(async () => {
    await t?.close();
    await Promise.all([a?.kill(), b?.kill()]);
  });

  const post = () => request(t.url).post(SEGMENT_PATH).set('Authorization', `Bearer ${key}`);

  it('with the default 800 ms per attempt, 2 attempts: a too-slow pool fails within about 1.6 s', async () => {
    const cfg = loadConfig({ STT_WORKER_URLS: `wa=${a.url},wb=${b.url}` }).speech.remote;
    expect(cfg).to.include({ attemptTimeoutMs: 800, maxAttempts: 2, budgetMs: 1600 });
    const pool = new RemotePool(cfg, logger);
    try {
      await pool.ready();
      const started = Date.now();
      // jfk.wav (11 s) takes 2-4 s to decode here: well past 800 ms.
      const err = await pool.transcribe({ pcm: pcmOf(clip('jfk.wav').path) }).catch((e: unknown) => e);
      const elapsed = Date.now() - started;
      expect(err).to.be.instanceOf(SpeechError);
      expect((err as SpeechError).code).to.equal('transcription_failed');
      expect((err as SpeechError).message)
        .to.match(/wa: no answer within \d+ ms/)
        .and.match(/wb: no answer within \d+ ms/);
      // Never before the two attempts' 1.6 s; the upper bound leaves room for a loaded machine's late
      // timers, far below what decoding the clip takes there (the messages say both attempts timed out).
      expect(elapsed).to.be.within(1550, 4000);
    } finally {
      await pool.close();
      await Promise.all([idle(a), idle(b)]);
    }
  });

  it('answers through a warm worker with X-Worker-Id and X-Fallback-Used: 0', async () => {
    const res = await post().attach('file', short, 'clip.wav');
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.headers['x-worker-id']).to.be.oneOf(['wa', 'wb']);
    expect(res.headers['x-fallback-used']).to.equal('0');
    expect(res.body.text).to.be.a('string').with.length.greaterThan(5);
    expect(res.body.words.length).to.be.greaterThan(3);
    expect(res.body.language).to.equal('en');
  });

  it('spreads concurrent requests by load and reaches a pinned worker', async () => {
    const both = await Promise.all([
      post().attach('file', short, '1.wav'),
      post().attach('file', short, '2.wav'),
    ]);
    expect(both.map((r) => r.headers['x-worker-id']).sort()).to.deep.equal(['wa', 'wb']);
    for (const id of ['wb', 'wa']) {
      const res = await post()
        .attach('file', short, 'clip.wav')
        .field('worker_id', id)
        .field('response_format', 'json');
      expect(res.status).to.equal(200);
      expect(res.headers['x-worker-id']).to.equal(id);
    }
  });

  it('idle workers take turns as primary: one request after another alternates between them', async () => {
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await post().attach('file', short, 'clip.wav').field('response_format', 'json');
      expect(res.status).to.equal(200);
      seen.push(res.headers['x-worker-id']);
    }
    expect(seen.filter((id) => id === 'wa')).to.have.length(2);
    expect(seen.filter((id) => id === 'wb')).to.have.length(2);
  });

  it('a caller that gives up does not mark a healthy worker down', async () => {
    const pool = t.deps.speech as RemotePool;
    const aborter = new AbortController();
    const pending = pool
      .transcribe({ pcm: pcmOf(clip('jfk.wav').path), signal: aborter.signal })
      .catch((e: unknown) => e);
    while (!pool.status().some((w) => w.inFlight > 0)) await new Promise((r) => setTimeout(r, 10));
    aborter.abort();
    const err = await pending;
    expect((err as SpeechError).code).to.equal('aborted');
    expect(pool.status().map((w) => w.healthy)).to.deep.equal([true, true]);
    await Promise.all([idle(a), idle(b)]);
  });

  it('a language a worker lacks is tried on the next worker; refused by all, it is 400 unsupported_language and nobody is marked down', async () => {
    const pool = t.deps.speech as RemotePool;
    const err = await pool
      .transcribe({ pcm: pcmOf(clip('librivox-austen-0880.wav').path), language: 'fr' })
      .catch((e: unknown) => e);
    expect((err as SpeechError).code).to.equal('unsupported_language');
    expect((err as SpeechError).message)
      .to.match(/fr/)
      .and.match(/refused by every worker tried: (wa, wb|wb, wa)\)$/);
    expect(pool.status().map((w) => w.healthy)).to.deep.equal([true, true]);
    const res = await post().attach('file', short, 'clip.wav').field('language', 'fr');
    expect(res.status).to.equal(400);
    expect(res.body.error.code).to.equal('unsupported_language');
  });

  it('an engine worker speaks OpenAI: the official SDK works in every response format', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${a.url}/v1`, maxRetries: 0 });
    const file = () => toFile(short, 'clip.wav', { type: 'audio/wav' });
    const verbose = await client.audio.transcriptions.create({
      file: await file(),
      model: 'whisper-1',
      response_format: 'verbose_json',
    });
    expect(verbose.segments?.[0]).to.include.keys('id', 'start', 'end', 'text', 'avg_logprob');
    expect(
      (await client.audio.transcriptions.create({ file: await file(), model: 'whisper-1' })).text,
    ).to.equal(verbose.text);
    expect(
      String(
        await client.audio.transcriptions.create({
          file: await file(),
          model: 'whisper-1',
          response_format: 'text',
        }),
      ).trim(),
    ).to.equal(verbose.text);
    expect(
      String(
        await client.audio.transcriptions.create({
          file: await file(),
          model: 'whisper-1',
          response_format: 'srt',
        }),
      ),
    ).to.match(/^1\n00:00:0/);
    expect(
      String(
        await client.audio.transcriptions.create({
          file: await file(),
          model: 'whisper-1',
          response_format: 'vtt',
        }),
      ),
    ).to.match(/^WEBVTT/);
    const models = await client.models.list();
    expect(models.data[0].id).to.equal('pocketsphinx-en-us');
  });

  it('the transcribe CLI prints text and writes subtitle files, for a file or a whole folder', async () => {
    const cli = (args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'cli/transcribe.ts'), ...args], {
        cwd: REPO_ROOT,
        encoding: 'utf8',
      });
    const file = clip('librivox-austen-0880.wav').path;
    const text = cli([file, '--url', b.url, '--key', 'sk-unused-by-engine']);
    expect(text.status, text.stderr).to.equal(0);
    expect(text.stdout.trim().split(' ').length).to.be.greaterThan(4);
    const out = path.join(REPO_ROOT, `test/.tmp/cli-${process.pid}`);
    const srt = cli([file, '--url', b.url, '--key', 'sk-unused-by-engine', '--format', 'srt', '--out', out]);
    expect(srt.status, srt.stderr).to.equal(0);
    expect(fs.readFileSync(path.join(out, 'librivox-austen-0880.srt'), 'utf8')).to.match(
      /^1\n00:00:00,\d{3} --> /,
    );
    fs.rmSync(out, { recursive: true, force: true });
    // A folder: every audio file in it (others skipped), one output file each; text mode prints "file: text".
    const folder = path.join(REPO_ROOT, `test/.tmp/cli-in-${process.pid}`);
    fs.mkdirSync(folder, { recursive: true });
    fs.copyFileSync(file, path.join(folder, 'one.wav'));
    fs.copyFileSync(clip('librivox-austen-0870.wav').path, path.join(folder, 'two.wav'));
    fs.writeFileSync(path.join(folder, 'notes.txt'), 'not audio');
    try {
      const vtt = cli([
        folder,
        '--url',
        b.url,
        '--key',
        'sk-unused-by-engine',
        '--format',
        'vtt',
        '--out',
        out,
      ]);
      expect(vtt.status, vtt.stderr).to.equal(0);
      expect(fs.readdirSync(out).sort()).to.deep.equal(['one.vtt', 'two.vtt']);
      for (const f of ['one.vtt', 'two.vtt'])
        expect(fs.readFileSync(path.join(out, f), 'utf8')).to.match(/^WEBVTT\n\n00:00:0/);
      const texts = cli([folder, '--url', b.url, '--key', 'sk-unused-by-engine', '--concurrency', '1']);
      expect(texts.status, texts.stderr).to.equal(0);
      const lines = texts.stdout.trim().split('\n');
      expect(lines.map((l) => path.basename(l.split(':')[0]))).to.deep.equal(['one.wav', 'two.wav']);
      for (const l of lines) expect(l.split(': ')[1].split(' ').length).to.be.greaterThan(3);
    } finally {
      fs.rmSync(folder, { recursive: true, force: true });
      fs.rmSync(out, { recursive: true, force: true });
    }
    const bad = cli([path.join(REPO_ROOT, 'package.json'), '--url', b.url, '--key', 'x']);
    expect(bad.status).to.equal(1);
    expect(bad.stderr).to.match(/invalid_audio/);
    // Nothing listening: the address and the reason, not just "fetch failed".
    const down = cli([file, '--url', 'http://127.0.0.1:59998', '--key', 'x']);
    expect(down.status).to.equal(1);
    expect(down.stderr).to.include(
      'cannot reach http://127.0.0.1:59998/v1/audio/transcriptions: ECONNREFUSED',
    );
  });

  it('when the primary dies mid-request, the fallback answers with X-Fallback-Used: 1 (and /metrics counts it)', async () => {
    const pool = t.deps.speech as RemotePool;
    const scrape = async () => (await request(t.url).get('/metrics').expect(200)).text;
    const before = await scrape();
    const pending = post()
      .attach('file', short, 'clip.wav')
      .then((r) => r);
    let primary: string | undefined;
    while (!primary) {
      primary = pool.status().find((w) => w.inFlight > 0)?.id;
      await new Promise((r) => setTimeout(r, 20));
    }
    await busy(primary === 'wa' ? a : b); // decoding has started there
    await (primary === 'wa' ? a : b).kill();
    const res = await pending;
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.headers['x-fallback-used']).to.equal('1');
    expect(res.headers['x-worker-id']).to.equal(primary === 'wa' ? 'wb' : 'wa');
    expect(res.body.text.length).to.be.greaterThan(5);
    // The dead worker is now avoided: the next request goes straight to the live one.
    const next = await post().attach('file', short, 'clip.wav').field('response_format', 'json');
    expect(next.headers['x-fallback-used']).to.equal('0');
    // Pinned requests get no fallback: pinning the dead worker fails.
    const pinned = await post().attach('file', short, 'clip.wav').field('worker_id', primary);
    expect(pinned.status).to.equal(502);
    expect(pinned.body.error).to.include({ code: 'transcription_failed', type: 'invalid_request_error' });

    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) =>
      seriesValue(after, name, labels) - seriesValue(before, name, labels);
    expect(delta('stt_speech_fallbacks_total')).to.equal(1);
    expect(delta('stt_speech_worker_attempts_total', { worker: primary, outcome: 'failed' })).to.be.at.least(
      2,
    );
    expect(delta('stt_speech_requests_total', { engine: 'remote', outcome: 'ok' })).to.equal(2);
    expect(
      delta('stt_speech_requests_total', { engine: 'remote', outcome: 'transcription_failed' }),
    ).to.equal(1);
    expect(seriesValue(after, 'stt_speech_worker_healthy', { worker: primary })).to.equal(0);
  });

  it('with both workers down: 502 transcription_failed within the budget', async () => {
    await Promise.all([a.kill(), b.kill()]);
    const billed = async () => (await t.deps.db('usage_events').where({ plane: 'segment' })).length;
    const billedBefore = await billed();
    const started = Date.now();
    const res = await post().attach('file', short, 'clip.wav');
    expect(res.status).to.equal(502);
    expect(res.body.error).to.include({ code: 'transcription_failed', type: 'invalid_request_error' });
    expect(res.body.error.message).to.be.a('string');
    expect(Date.now() - started).to.be.below(t.config.speech.remote.budgetMs);
    // Failed attempts are not billed.
    expect(await billed()).to.equal(billedBefore);
  });
});
