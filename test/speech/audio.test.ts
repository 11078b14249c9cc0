import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { expect } from 'chai';
import {
  AudioDecodeError,
  AudioTooLongError,
  canonicalWavSamples,
  decodeAudio,
  decodeStream,
  decodeUpload,
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

  it('the decode limit is a stall watchdog: long audio that keeps decoding passes it; a stalled decoder is stopped', async function () {
    this.timeout(120_000);
    // 4,000 s of silence as FLAC (small upload, seconds of decoding): longer than the limit, never stalled.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-watchdog-'));
    try {
      const flac = path.join(dir, 'silence.flac');
      execFileSync('ffmpeg', [
        '-hide_banner', '-loglevel', 'error', '-f', 'lavfi', '-i', 'anullsrc=r=8000:cl=mono', '-t', '4000',
        '-c:a', 'flac', flac,
      ]); // prettier-ignore
      const started = Date.now();
      const audio = await decodeUpload(fs.readFileSync(flac), {
        timeoutMs: 1500,
        spool: { afterSeconds: 60, dir },
      });
      const tookMs = Date.now() - started;
      expect(audio.seconds).to.be.closeTo(4000, 0.1);
      await audio.dispose();
      // Only meaningful when the decode outlasted the limit (it does on any machine seen so far).
      expect(tookMs, 'decode took longer than the limit').to.be.greaterThan(1500);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // Input that never comes: ffmpeg waits on it, makes no progress, and is stopped.
    const stalled = new PassThrough();
    const started = Date.now();
    const err = await decodeStream(stalled, { timeoutMs: 1000 }).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(AudioDecodeError);
    expect((err as AudioDecodeError).code).to.equal('decoder_unavailable');
    expect((err as Error).message).to.match(/no progress for 1000 ms/);
    expect(Date.now() - started).to.be.below(5000);
    stalled.destroy();
  });

  it('writes and reads back its own WAV; computes duration from PCM length', () => {
    const pcm = Buffer.alloc(32_000 * 2);
    const back = canonicalWavSamples(pcmToWav(pcm));
    expect(back?.length).to.equal(pcm.length);
    expect(pcmDurationSeconds(pcm)).to.equal(2);
    expect(pcmDurationSeconds(3)).to.equal(1 / 16000);
  });
});
