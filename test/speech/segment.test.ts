import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { expect } from 'chai';
import request from 'supertest';
import OpenAI, { toFile } from 'openai';
import { pcmToWav } from '../../shared/audio/index.js';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import { clip, ffmpegConvert, wer } from './helpers.js';
import { startSpeechApp, type SpeechTestApp } from './app.js';
import { seriesValue } from '../helpers/metrics.js';

describe('speech: segment endpoint POST /v1/audio/transcriptions', function () {
  this.timeout(60_000);
  let t: SpeechTestApp;
  let key: string;
  let keyId: string;
  let smallKey: string;
  const austen = clip('librivox-austen-0880.wav');
  const austenWav = fs.readFileSync(austen.path);
  const silenceWav = pcmToWav(Buffer.alloc(16000 * 2));

  before(async () => {
    t = await startSpeechApp({
      STT_THREADS: '2',
      SEGMENT_MAX_UPLOAD_MB: '1',
      PLANS_JSON: JSON.stringify({ small: { maxAudioSecondsPerRequest: 10, maxRequestsPerMinute: 3 } }),
    });
    ({ key, id: keyId } = await t.issueKey('pro'));
    ({ key: smallKey } = await t.issueKey('small'));
  });
  after(() => t?.close());

  const post = (k = key) => request(t.url).post(SEGMENT_PATH).set('Authorization', `Bearer ${k}`);

  it('transcribes a clip as verbose_json by default, with worker headers, and bills its seconds', async () => {
    const res = await post().attach('file', austenWav, 'clip.wav').field('language', 'en');
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.headers['x-worker-id']).to.match(/^builtin-\d$/);
    expect(res.headers['x-fallback-used']).to.equal('0');
    expect(res.body).to.include.keys('text', 'language', 'duration', 'segments', 'words');
    expect(res.body.language).to.equal('en');
    expect(res.body.duration).to.be.closeTo(austen.seconds, 0.01);
    expect(wer(austen.reference, res.body.text)).to.be.below(0.6);
    expect(res.body.words[0]).to.include.keys('word', 'start', 'end', 'confidence');
    const rows = await t.deps.db('usage_events').where({ key_id: keyId, plane: 'segment' });
    expect(rows).to.have.length(1);
    expect(Number(rows[0].audio_seconds)).to.be.closeTo(austen.seconds, 0.01);
  });

  it('shows each transcription on /metrics: engine call, engine time, audio and billed seconds, the route', async () => {
    const scrape = async () => (await request(t.url).get('/metrics').expect(200)).text;
    const before = await scrape();
    await post().attach('file', austenWav, 'clip.wav').field('response_format', 'json').expect(200);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) =>
      seriesValue(after, name, labels) - seriesValue(before, name, labels);
    expect(delta('stt_speech_requests_total', { engine: 'builtin', outcome: 'ok' })).to.equal(1);
    expect(delta('stt_speech_engine_seconds_count', { engine: 'builtin' })).to.equal(1);
    expect(delta('stt_speech_audio_seconds_total', { engine: 'builtin' })).to.be.closeTo(
      austen.seconds,
      0.01,
    );
    expect(delta('stt_billed_audio_seconds_total', { plane: 'segment' })).to.be.closeTo(austen.seconds, 0.01);
    expect(delta('stt_http_requests_total', { route: SEGMENT_PATH, method: 'POST', status: '200' })).to.equal(
      1,
    );
  });

  it('answers json, text, srt and vtt; decodes compressed uploads', async () => {
    const mp3 = await ffmpegConvert(austenWav, ['-f', 'mp3']);
    const [json, text, srt, vtt] = await Promise.all([
      post().attach('file', mp3, 'clip.mp3').field('response_format', 'json'),
      post().attach('file', austenWav, 'clip.wav').field('response_format', 'text'),
      post().attach('file', austenWav, 'clip.wav').field('response_format', 'srt'),
      post().attach('file', austenWav, 'clip.wav').field('response_format', 'vtt'),
    ]);
    expect(json.status).to.equal(200);
    expect(Object.keys(json.body)).to.deep.equal(['text']);
    expect(text.headers['content-type']).to.match(/^text\/plain/);
    expect(text.text.endsWith('\n')).to.equal(true);
    expect(srt.headers['content-type']).to.match(/^application\/x-subrip/);
    expect(srt.text).to.match(/^1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n/);
    expect(vtt.headers['content-type']).to.match(/^text\/vtt/);
    expect(vtt.text).to.match(/^WEBVTT\n\n\d\d:\d\d:\d\d\.\d{3} --> /);
  });

  it('transcribes and bills silence and empty clips (200, empty text)', async () => {
    const before = await t.deps
      .db('usage_events')
      .where({ key_id: keyId })
      .count<{ count: string }[]>('* as count');
    const silent = await post().attach('file', silenceWav, 'silence.wav');
    expect(silent.status).to.equal(200);
    expect(silent.body.text).to.equal('');
    expect(silent.body.duration).to.equal(1);
    const empty = await post()
      .attach('file', pcmToWav(Buffer.alloc(0)), 'empty.wav')
      .field('response_format', 'json');
    expect(empty.status).to.equal(200);
    expect(empty.body).to.deep.equal({ text: '' });
    const zeroBytes = await post().attach('file', Buffer.alloc(0), 'zero.wav');
    expect(zeroBytes.status, JSON.stringify(zeroBytes.body)).to.equal(200);
    expect(zeroBytes.body).to.include({ text: '', duration: 0 });
    const after = await t.deps
      .db('usage_events')
      .where({ key_id: keyId })
      .count<{ count: string }[]>('* as count');
    expect(Number(after[0].count) - Number(before[0].count)).to.equal(3);
  });

  describe('errors {error:{message,type,code}}', () => {
    const expectError = (res: request.Response, status: number, code: string) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(status);
      expect(res.body.error).to.include({ code });
      expect(res.body.error.type).to.be.a('string');
      expect(res.body.error.message).to.be.a('string');
    };

    it('401 without a key', async () => {
      const res = await request(t.url).post(SEGMENT_PATH).attach('file', austenWav, 'clip.wav');
      expectError(res, 401, 'missing_api_key');
    });

    it('400 invalid_content_type for bodies that are not multipart; JSON is the deprecated job submission (4.4)', async () => {
      expectError(await post().set('Content-Type', 'text/plain').send('hello'), 400, 'invalid_content_type');
      // A JSON body is the batch plane's submission: without `audio_url` a batch 400, `{error: string}` (7.2).
      const json = await post().send({ hello: 'world' });
      expect(json.status, JSON.stringify(json.body)).to.equal(400);
      expect(json.body.error).to.be.a('string').and.include('audio_url');
      expect(json.headers.deprecation).to.equal('true');
      expect(json.headers.link).to.include('</v1/audio/transcriptions/jobs>');
    });

    it('400 missing_file, invalid_audio, invalid_response_format, unsupported_language, unknown_worker', async () => {
      expectError(await post().field('model', 'x'), 400, 'missing_file');
      expectError(
        await post().attach('file', Buffer.from('not audio at all'), 'x.wav'),
        400,
        'invalid_audio',
      );
      expectError(
        await post().attach('file', austenWav, 'a.wav').field('response_format', 'xml'),
        400,
        'invalid_response_format',
      );
      expectError(
        await post().attach('file', austenWav, 'a.wav').field('language', 'fr'),
        400,
        'unsupported_language',
      );
      expectError(
        await post().attach('file', austenWav, 'a.wav').field('worker_id', 'nope'),
        400,
        'unknown_worker',
      );
      // OpenAI's timestamp_granularities[] (one field per value) is checked: verbose_json has both anyway.
      const words = await post()
        .attach('file', austenWav, 'a.wav')
        .field('timestamp_granularities[]', 'segment')
        .field('timestamp_granularities[]', 'words');
      expectError(words, 400, 'invalid_request');
      expect(words.body.error.message).to.include('must list word and/or segment');
      const both = await post()
        .attach('file', austenWav, 'a.wav')
        .field('timestamp_granularities[]', 'word')
        .field('timestamp_granularities[]', 'segment');
      expect(both.status, JSON.stringify(both.body)).to.equal(200);
      expect(both.body.words).to.be.an('array').that.is.not.empty;
      // Two clips in one form: refused, not the first transcribed and the second dropped.
      const two = await post().attach('file', austenWav, 'a.wav').attach('file', austenWav, 'b.wav');
      expectError(two, 400, 'invalid_request');
      expect(two.body.error.message).to.include('2 parts named "file"');
    });

    it('413 file_too_large above the configured cap', async () => {
      const big = Buffer.alloc(1.5 * 1024 * 1024, 1);
      const res = await post()
        .attach('file', big, 'big.wav')
        .catch((e: { response?: request.Response }) => e.response!);
      expectError(res, 413, 'file_too_large');
    });

    it('413 file_too_large for a chunked upload with no Content-Length, counted while it streams', async () => {
      const boundary = 'b0undary';
      const res = await new Promise<{ status: number; body: { error: { code: string } } }>(
        (resolve, reject) => {
          const req = http.request(`${t.url}${SEGMENT_PATH}`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${key}`,
              'content-type': `multipart/form-data; boundary=${boundary}`,
              'transfer-encoding': 'chunked',
            },
          });
          req.on('response', (r) => {
            let text = '';
            r.on('data', (d) => (text += d)).on('end', () =>
              resolve({ status: r.statusCode!, body: JSON.parse(text) }),
            );
          });
          // The server may close the connection once it has answered: only an error with no answer fails.
          req.on('error', (err) => setTimeout(() => reject(err), 500));
          req.write(
            `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\nContent-Type: audio/wav\r\n\r\n`,
          );
          let sent = 0;
          const more = () => {
            // Up to 3 MiB in 64 KiB chunks; the server answers (and stops reading) past 1 MiB.
            while (sent < 3 * 1024 * 1024) {
              sent += 64 * 1024;
              if (!req.write(Buffer.alloc(64 * 1024, 1))) return void req.once('drain', more);
            }
            req.end(`\r\n--${boundary}--\r\n`);
          };
          more();
        },
      );
      expect(res.status).to.equal(413);
      expect(res.body.error.code).to.equal('file_too_large');
    });

    it('400 invalid_multipart for a multipart body that cannot be parsed', async () => {
      const res = await post()
        .set('Content-Type', 'multipart/form-data; boundary=abc')
        .send(
          '--abc\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\ntruncated with no closing boundary',
        );
      expectError(res, 400, 'invalid_multipart');
    });

    it('uploads never touch the disk: no file appears in the temporary directory', async () => {
      const before = new Set(fs.readdirSync(os.tmpdir()));
      await post().attach('file', austenWav, 'a.wav').field('response_format', 'json').expect(200);
      const added = fs.readdirSync(os.tmpdir()).filter((f) => !before.has(f));
      // Other suites may create their own directories concurrently; formidable's files are hex names with no prefix.
      expect(added.filter((f) => /^[0-9a-f]{20,}$/.test(f))).to.deep.equal([]);
    });

    it("400 audio_too_long beyond the plan's maxAudioSecondsPerRequest; requests count against maxRequestsPerMinute", async () => {
      const jfk = fs.readFileSync(clip('jfk.wav').path); // 11 s > 10 s for this small plan
      expectError(await post(smallKey).attach('file', jfk, 'jfk.wav'), 400, 'audio_too_long');
      await post(smallKey).attach('file', silenceWav, 's.wav').expect(200);
      await post(smallKey).attach('file', silenceWav, 's.wav').expect(200);
      const limited = await post(smallKey).attach('file', silenceWav, 's.wav');
      expectError(limited, 429, 'rate_limit_exceeded');
      expect(limited.headers['retry-after']).to.match(/^\d+$/);
    });
  });

  it('works with the official openai SDK in every response format', async () => {
    const client = new OpenAI({ apiKey: key, baseURL: `${t.url}/v1`, maxRetries: 0 });
    const file = () => toFile(austenWav, 'clip.wav', { type: 'audio/wav' });
    const [verbose, json, text, srt, vtt] = await Promise.all([
      client.audio.transcriptions.create({
        file: await file(),
        model: 'whisper-1',
        response_format: 'verbose_json',
        timestamp_granularities: ['word', 'segment'],
      }),
      client.audio.transcriptions.create({ file: await file(), model: 'whisper-1' }),
      client.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'text' }),
      client.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'srt' }),
      client.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'vtt' }),
    ]);
    expect(verbose.text).to.be.a('string').and.not.equal('');
    expect(verbose.duration).to.be.closeTo(austen.seconds, 0.01);
    expect(verbose.words?.length).to.be.greaterThan(3);
    expect(json.text).to.equal(verbose.text);
    expect(String(text).trim()).to.equal(verbose.text);
    expect(String(srt)).to.contain(' --> ');
    expect(String(vtt)).to.match(/^WEBVTT/);
    const withResponse = await client.audio.transcriptions
      .create({ file: await file(), model: 'whisper-1', response_format: 'json' })
      .withResponse();
    expect(withResponse.response.headers.get('x-fallback-used')).to.equal('0');
  });
});
