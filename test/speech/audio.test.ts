import fs from 'node:fs';
import { expect } from 'chai';
import {
  AudioDecodeError,
  AudioTooLongError,
  canonicalWavSamples,
  decodeAudio,
  pcmDurationSeconds,
  pcmToWav,
} from '../../shared/audio/index.js';
import { faststart } from '../../shared/audio/faststart.js';
import { clip, ffmpegConvert } from './helpers.js';

describe('speech: audio decoding (ffmpeg through pipes)', function () {
  this.timeout(20_000);
  const source = clip('librivox-austen-0880.wav');
  const wav = fs.readFileSync(source.path);
  const expectedSeconds = source.seconds;

  it('passes a 16 kHz mono PCM16 WAV through without ffmpeg', async () => {
    const pcm = await decodeAudio(wav);
    expect(pcm.length).to.equal(canonicalWavSamples(wav)!.length);
    expect(pcmDurationSeconds(pcm)).to.be.closeTo(expectedSeconds, 0.01);
  });

  const formats: [string, string[]][] = [
    ['MP3', ['-f', 'mp3']],
    ['OGG/Opus', ['-c:a', 'libopus', '-f', 'ogg']],
    ['FLAC', ['-f', 'flac']],
    ['WebM', ['-c:a', 'libopus', '-f', 'webm']],
    ['M4A (fragmented, streamable)', ['-c:a', 'aac', '-movflags', 'frag_keyframe+empty_moov', '-f', 'mp4']],
    ['WAV 44.1 kHz stereo', ['-ar', '44100', '-ac', '2', '-f', 'wav']],
  ];
  for (const [name, args] of formats) {
    it(`decodes ${name} to 16 kHz mono PCM16`, async () => {
      const encoded = await ffmpegConvert(wav, args);
      const pcm = await decodeAudio(encoded);
      expect(pcmDurationSeconds(pcm)).to.be.closeTo(expectedSeconds, 0.15);
    });
  }

  it('decodes an M4A whose index (moov) sits after the media data, by moving it in memory', async () => {
    // The mp4 muxer needs a seekable output; build a long moov-at-end file in test/.tmp.
    fs.mkdirSync('test/.tmp', { recursive: true });
    const file = `test/.tmp/moov-at-end-${process.pid}.m4a`;
    const long = Buffer.concat(Array.from({ length: 12 }, () => canonicalWavSamples(wav)!));
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(
      'ffmpeg',
      [
        '-y',
        '-loglevel',
        'error',
        '-f',
        's16le',
        '-ar',
        '16000',
        '-ac',
        '1',
        '-i',
        'pipe:0',
        '-c:a',
        'aac',
        '-b:a',
        '128k',
        file,
      ],
      { input: long },
    );
    expect(r.status).to.equal(0);
    const m4a = fs.readFileSync(file);
    fs.unlinkSync(file);
    const boxes = m4a.indexOf('moov') > m4a.indexOf('mdat');
    expect(boxes, 'fixture has moov after mdat').to.equal(true);
    const moved = faststart(m4a);
    expect(moved.indexOf('moov')).to.be.lessThan(moved.indexOf('mdat'));
    const pcm = await decodeAudio(m4a);
    expect(pcmDurationSeconds(pcm)).to.be.closeTo(expectedSeconds * 12, 0.3);
  });

  it('refuses undecodable input with a typed error', async () => {
    const err = await decodeAudio(Buffer.from('this is not audio at all, just text')).catch(
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(AudioDecodeError);
    expect((err as AudioDecodeError).code).to.equal('invalid_audio');
  });

  it('reads an empty (0-byte) file as a clip with no samples', async () => {
    expect((await decodeAudio(Buffer.alloc(0))).length).to.equal(0);
  });

  it('stops decoding past the allowed duration', async () => {
    const mp3 = await ffmpegConvert(wav, ['-f', 'mp3']);
    const err = await decodeAudio(mp3, { maxSeconds: 1 }).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(AudioTooLongError);
    const direct = await decodeAudio(wav, { maxSeconds: 1 }).catch((e: unknown) => e);
    expect(direct).to.be.instanceOf(AudioTooLongError);
  });

  it('writes and reads back its own WAV; computes duration from PCM length', () => {
    const pcm = Buffer.alloc(32_000 * 2);
    const back = canonicalWavSamples(pcmToWav(pcm));
    expect(back?.length).to.equal(pcm.length);
    expect(pcmDurationSeconds(pcm)).to.equal(2);
    expect(pcmDurationSeconds(3)).to.equal(1 / 16000);
  });
});
