/**
 * Audio decoding: any container/codec ffmpeg reads (WAV, MP3, OGG/Opus,
 * FLAC, M4A, WebM, ...) in, 16 kHz mono PCM16LE out. The input goes to
 * ffmpeg's stdin and PCM comes back on its stdout; nothing touches disk.
 * A WAV that is already 16 kHz mono PCM16 skips ffmpeg entirely.
 */
import { spawn } from 'node:child_process';
import { Readable } from 'node:stream';
import { faststart, isIsoBmff } from './faststart.js';
import { PCM_BYTES_PER_SECOND as BYTES_PER_SECOND, PCM_SAMPLE_RATE, pcmDurationSeconds } from './pcm.js';

export { PCM_BYTES_PER_SECOND, PCM_SAMPLE_RATE, pcmDurationSeconds } from './pcm.js';

export class AudioDecodeError extends Error {
  override name = 'AudioDecodeError';
  /** `invalid_audio` (unreadable input) or `decoder_unavailable` (ffmpeg missing, timed out). */
  constructor(
    message: string,
    readonly code: 'invalid_audio' | 'decoder_unavailable' = 'invalid_audio',
  ) {
    super(message);
  }
}

export interface DecodeOptions {
  ffmpegPath?: string;
  timeoutMs?: number;
  /** Refuse output longer than this many seconds (stops decoding early). */
  maxSeconds?: number;
  signal?: AbortSignal;
}

/** The 44-byte header of a WAV holding `pcmBytes` bytes of 16 kHz mono PCM16 samples. */
export function wavHeader(pcmBytes: number): Buffer {
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'latin1');
  header.writeUInt32LE(36 + pcmBytes, 4);
  header.write('WAVE', 8, 'latin1');
  header.write('fmt ', 12, 'latin1');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(PCM_SAMPLE_RATE, 24);
  header.writeUInt32LE(BYTES_PER_SECOND, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'latin1');
  header.writeUInt32LE(pcmBytes, 40);
  return header;
}

/** A 44-byte-header WAV around 16 kHz mono PCM16 samples. */
export function pcmToWav(pcm: Buffer): Buffer {
  return Buffer.concat([wavHeader(pcm.length), pcm]);
}

/**
 * The samples of a WAV that is already 16 kHz mono PCM16LE, or undefined
 * when the input is anything else (then ffmpeg converts it).
 */
export function canonicalWavSamples(buf: Buffer): Buffer | undefined {
  if (buf.length < 12 || buf.toString('latin1', 0, 4) !== 'RIFF' || buf.toString('latin1', 8, 12) !== 'WAVE')
    return undefined;
  let pos = 12;
  let fmtOk = false;
  while (pos + 8 <= buf.length) {
    const id = buf.toString('latin1', pos, pos + 4);
    const size = buf.readUInt32LE(pos + 4);
    const body = pos + 8;
    if (id === 'fmt ') {
      if (body + 16 > buf.length) return undefined;
      const format = buf.readUInt16LE(body);
      fmtOk =
        (format === 1 || format === 0xfffe) &&
        buf.readUInt16LE(body + 2) === 1 &&
        buf.readUInt32LE(body + 4) === PCM_SAMPLE_RATE &&
        buf.readUInt16LE(body + 14) === 16;
      if (!fmtOk) return undefined;
    } else if (id === 'data') {
      if (!fmtOk) return undefined;
      // Streaming writers leave the size as 0 or 0xffffffff: take the rest of the file.
      const end = size === 0 || size === 0xffffffff || body + size > buf.length ? buf.length : body + size;
      const samples = buf.subarray(body, end);
      return samples.length % 2 ? samples.subarray(0, samples.length - 1) : samples;
    }
    pos = body + size + (size % 2);
  }
  return undefined;
}

/** Decodes an audio file held in memory. */
export async function decodeAudio(input: Buffer, opts: DecodeOptions = {}): Promise<Buffer> {
  // An empty file is an empty clip: no samples (transcribed and billed as such, interface 2.6).
  if (input.length === 0) return Buffer.alloc(0);
  const direct = canonicalWavSamples(input);
  if (direct) {
    if (opts.maxSeconds !== undefined && pcmDurationSeconds(direct) > opts.maxSeconds) {
      throw new AudioTooLongError(opts.maxSeconds);
    }
    return direct;
  }
  return decodeStream(Readable.from([isIsoBmff(input) ? faststart(input) : input]), opts);
}

export class AudioTooLongError extends Error {
  override name = 'AudioTooLongError';
  constructor(readonly maxSeconds: number) {
    super(`The audio is longer than ${maxSeconds} seconds.`);
  }
}

/** Decodes a stream of any format ffmpeg reads through stdin/stdout pipes. */
export function decodeStream(input: Readable, opts: DecodeOptions = {}): Promise<Buffer> {
  const maxBytes =
    opts.maxSeconds === undefined ? Infinity : Math.ceil(opts.maxSeconds * BYTES_PER_SECOND) + 2;
  return new Promise<Buffer>((resolve, reject) => {
    const ff = spawn(
      opts.ffmpegPath ?? 'ffmpeg',
      [
        '-hide_banner',
        '-nostats',
        '-loglevel',
        'error',
        '-i',
        'pipe:0',
        '-vn',
        '-sn',
        '-dn',
        '-ac',
        '1',
        '-ar',
        String(PCM_SAMPLE_RATE),
        '-acodec',
        'pcm_s16le',
        '-f',
        's16le',
        'pipe:1',
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const chunks: Buffer[] = [];
    let bytes = 0;
    let stderr = '';
    let settled = false;
    const finish = (err: Error | undefined, pcm?: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      input.unpipe(ff.stdin);
      if (err) {
        ff.kill('SIGKILL');
        reject(err);
      } else resolve(pcm!);
    };
    const onAbort = () => finish(new AudioDecodeError('Decoding was aborted.', 'decoder_unavailable'));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(
      () =>
        finish(
          new AudioDecodeError(`Decoding took longer than ${opts.timeoutMs} ms.`, 'decoder_unavailable'),
        ),
      opts.timeoutMs ?? 30_000,
    );
    ff.on('error', (err) =>
      finish(new AudioDecodeError(`ffmpeg could not be started: ${err.message}`, 'decoder_unavailable')),
    );
    // ffmpeg may stop reading early (bad input); a broken stdin pipe is expected then.
    ff.stdin.on('error', () => {});
    input.on('error', (err) => finish(new AudioDecodeError(`Reading the upload failed: ${err.message}`)));
    ff.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 4000) stderr += d.toString();
    });
    ff.stdout.on('data', (d: Buffer) => {
      chunks.push(d);
      bytes += d.length;
      if (bytes > maxBytes) finish(new AudioTooLongError(opts.maxSeconds!));
    });
    ff.on('close', (code) => {
      if (code === 0) {
        const pcm = Buffer.concat(chunks, bytes);
        finish(undefined, pcm.length % 2 ? pcm.subarray(0, pcm.length - 1) : pcm);
      } else {
        const detail = stderr.trim().split('\n').pop() ?? '';
        finish(
          new AudioDecodeError(
            `The file could not be decoded as audio${detail ? ` (${detail.slice(0, 200)})` : ''}.`,
          ),
        );
      }
    });
    input.pipe(ff.stdin);
  });
}
