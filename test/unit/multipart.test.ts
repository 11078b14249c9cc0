import { expect } from 'chai';
import { multipartBody } from '../../shared/http/multipart.js';
import { pcmToWav, wavHeader } from '../../shared/audio/index.js';

/** Reads a body back with the platform's own multipart parser (WHATWG Response.formData). */
async function parse(form: { body: Buffer; contentType: string }): Promise<FormData> {
  return new Response(new Uint8Array(form.body), {
    headers: { 'content-type': form.contentType },
  }).formData();
}

describe('unit: multipart upload body (speech worker uploads)', () => {
  it('carries the fields in order and the file byte for byte', async () => {
    const data = Buffer.from([0, 1, 2, 13, 10, 45, 45, 255, 254]);
    const form = multipartBody(
      [
        ['model', 'whisper-1'],
        ['timestamp_granularities[]', 'word'],
        ['timestamp_granularities[]', 'segment'],
        ['prompt', 'Zürich, "quoted"\r\nand a second line'],
      ],
      { name: 'file', filename: 'audio.wav', type: 'audio/wav', data },
    );
    expect(form.contentType).to.match(/^multipart\/form-data; boundary=----stt[0-9a-f]{24}$/);
    const parsed = await parse(form);
    expect(parsed.get('model')).to.equal('whisper-1');
    expect(parsed.getAll('timestamp_granularities[]')).to.deep.equal(['word', 'segment']);
    expect(parsed.get('prompt')).to.equal('Zürich, "quoted"\r\nand a second line');
    const file = parsed.get('file') as File;
    expect(file.name).to.equal('audio.wav');
    expect(file.type).to.equal('audio/wav');
    expect(Buffer.from(await file.arrayBuffer())).to.deep.equal(data);
  });

  it('writes a file given in parts as those parts in order (a WAV header and its samples)', async () => {
    const pcm = Buffer.from(Array.from({ length: 640 }, (_, i) => i % 251));
    const form = multipartBody([], {
      name: 'file',
      filename: 'audio.wav',
      type: 'audio/wav',
      data: [wavHeader(pcm.length), pcm],
    });
    const file = (await parse(form)).get('file') as File;
    expect(Buffer.from(await file.arrayBuffer())).to.deep.equal(pcmToWav(pcm));
  });

  it('uses a new random boundary for every body', () => {
    const a = multipartBody([], {
      name: 'file',
      filename: 'a.wav',
      type: 'audio/wav',
      data: Buffer.alloc(4),
    });
    const b = multipartBody([], {
      name: 'file',
      filename: 'a.wav',
      type: 'audio/wav',
      data: Buffer.alloc(4),
    });
    expect(a.contentType).to.not.equal(b.contentType);
  });
});
