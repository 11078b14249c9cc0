/**
 * OpenAI compatibility beyond the response formats (test/speech/segment.test.ts):
 * the official `openai` SDK's streaming transcription, its model list, and
 * endpoints this service does not offer, all against the real app and engine.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import OpenAI, { toFile } from 'openai';
import { startSpeechApp, type SpeechTestApp } from '../speech/app.js';
import { REPO_ROOT } from '../helpers/service.js';
import { wer } from '../speech/helpers.js';
import { buildMinuteOfSpeech } from '../batch/helpers.js';

const SAMPLE = fs.readFileSync(path.join(REPO_ROOT, 'samples/jfk.wav'));
const JFK =
  'and so my fellow americans ask not what your country can do for you ask what you can do for your country';

describe('OpenAI compatibility: streaming, models, endpoints not offered', function () {
  this.timeout(120_000);
  let t: SpeechTestApp;
  let client: OpenAI;

  before(async () => {
    // Generous decode limits: the test machine is shared and loaded.
    t = await startSpeechApp({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
    const { key } = await t.issueKey('pro');
    client = new OpenAI({ apiKey: key, baseURL: `${t.url}/v1`, maxRetries: 0 });
  });
  after(() => t?.close());

  it('streams transcript.text.delta events, then transcript.text.done with the full text', async () => {
    const stream = await client.audio.transcriptions.create({
      file: await toFile(SAMPLE, 'jfk.wav', { type: 'audio/wav' }),
      model: 'whisper-1',
      stream: true,
    });
    const events: { type: string; delta?: string; text?: string }[] = [];
    for await (const event of stream) events.push(event);
    expect(events.length).to.be.at.least(2);
    const done = events.at(-1)!;
    expect(done.type).to.equal('transcript.text.done');
    const deltas = events.slice(0, -1);
    expect(deltas.every((e) => e.type === 'transcript.text.delta')).to.equal(true);
    expect(deltas.map((e) => e.delta).join('')).to.equal(done.text);
    expect(wer(JFK, done.text!)).to.be.below(0.5);

    // The same request without streaming gives the same text.
    const plain = await client.audio.transcriptions.create({
      file: await toFile(SAMPLE, 'jfk.wav', { type: 'audio/wav' }),
      model: 'whisper-1',
      response_format: 'json',
    });
    expect(plain.text).to.equal(done.text);
  });

  it('streams as it decodes: the first delta of a minute of speech comes long before the answer ends', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stream-minute-'));
    const minute = buildMinuteOfSpeech(path.join(dir, 'minute.wav'));
    try {
      const started = performance.now();
      const stream = await client.audio.transcriptions.create({
        file: await toFile(fs.readFileSync(minute), 'minute.wav', { type: 'audio/wav' }),
        model: 'whisper-1',
        stream: true,
      });
      const events: { type: string; delta?: string; text?: string; at: number }[] = [];
      for await (const event of stream) events.push({ ...event, at: performance.now() - started });
      const deltas = events.filter((e) => e.type === 'transcript.text.delta');
      const done = events.at(-1)!;
      expect(done.type).to.equal('transcript.text.done');
      expect(deltas.length, 'pieces').to.be.at.least(3);
      expect(deltas.map((e) => e.delta).join('')).to.equal(done.text);
      // Before: every delta left after the whole decode, within 20 ms of the end.
      expect(
        deltas[0].at,
        `first delta at ${Math.round(deltas[0].at)} ms of ${Math.round(done.at)}`,
      ).to.be.below(done.at * 0.5);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers text/event-stream on the wire, and refuses a stream value that is not a boolean', async () => {
    const { key } = await t.issueKey('pro');
    const post = (stream: string) => {
      const f = new FormData();
      f.append('file', new Blob([SAMPLE]), 'jfk.wav');
      f.append('stream', stream);
      return fetch(`${t.url}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${key}` },
        body: f,
      });
    };
    const res = await post('true');
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.match(/^text\/event-stream/);
    const body = await res.text();
    expect(body).to.match(/^data: \{"type":"transcript\.text\.delta"/);
    expect(body.trimEnd().split('\n\n').at(-1)).to.match(/^data: \{"type":"transcript\.text\.done","text":/);

    const refused = await post('yes');
    expect(refused.status).to.equal(400);
    const err = (await refused.json()) as { error: { code: string; type: string; message: string } };
    expect(err.error).to.include({ code: 'invalid_request', type: 'invalid_request_error' });
    expect(err.error.message).to.include('stream');
  });

  it('lists the models this deployment runs', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    expect(models.map((m) => m.id)).to.deep.equal(['pocketsphinx-en-us']);
    expect(models[0]).to.include({ object: 'model', owned_by: 'stt-service' });
    const one = await client.models.retrieve('pocketsphinx-en-us');
    expect(one.id).to.equal('pocketsphinx-en-us');
    const missing = await client.models.retrieve('gpt-4o-transcribe').catch((e: unknown) => e);
    expect(missing).to.be.instanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).to.equal('model_not_found');
    const anonymous = await fetch(`${t.url}/v1/models`);
    expect(anonymous.status).to.equal(401);
  });

  it('says which endpoints it does not offer, in OpenAI’s error shape', async () => {
    const translation = await client.audio.translations
      .create({ file: await toFile(SAMPLE, 'jfk.wav', { type: 'audio/wav' }), model: 'whisper-1' })
      .catch((e: unknown) => e);
    expect(translation).to.be.instanceOf(OpenAI.NotFoundError);
    const e = translation as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e.code).to.equal('endpoint_not_offered');
    expect(e.type).to.equal('invalid_request_error');
    expect(e.message)
      .to.include('does not offer POST /v1/audio/translations')
      .and.include('/v1/audio/transcriptions');

    const chat = await client.chat.completions
      .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] })
      .catch((err: unknown) => err);
    expect(chat).to.be.instanceOf(OpenAI.NotFoundError);
    expect((chat as InstanceType<typeof OpenAI.NotFoundError>).message).to.include('chat completions');
  });
});
