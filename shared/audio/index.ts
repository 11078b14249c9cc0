/**
 * Audio decoding, the one decoder of the service: any container/codec
 * ffmpeg reads (WAV, MP3, OGG/Opus, FLAC, M4A, WebM, ...) in, 16 kHz mono
 * PCM16LE out, under one policy (the bounds of ffmpeg.ts, the stall
 * watchdog of `runFfmpeg`). An upload goes to ffmpeg's stdin and PCM comes
 * back on its stdout; a clip stays in memory, long audio is spooled to a
 * file as it is decoded (decodeUpload). A WAV that is already 16 kHz mono
 * PCM16 skips ffmpeg entirely. A batch job's download is decoded from its
 * file to a PCM file (decodeFile) and read back a range at a time
 * (readRange).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { Readable } from 'node:stream';
import { AUDIO_DECODE_TIMEOUT_MS } from '../config/speech.js';
import { InsufficientStorageError, saysDiskFull } from '../disk.js';
import { boundedFfmpeg, ffmpegInputArgs, ffmpegRefusal } from './ffmpeg.js';
import { faststart, isIsoBmff } from './faststart.js';
import { PCM_BYTES_PER_SECOND as BYTES_PER_SECOND, PCM_SAMPLE_RATE, pcmDurationSeconds } from './pcm.js';
import { EnvelopeBuilder } from './slicing.js';
import { spoolFile } from './spool.js';

export { sweepSpool } from './spool.js';

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
  /** The stall watchdog: ffmpeg is stopped after this long without progress (`config.speech.audio.decodeTimeoutMs`). */
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

/** A RIFF chunk header (four printable ASCII characters and a size that fits) at `pos`, or the end. */
function chunkFollows(buf: Buffer, pos: number): boolean {
  if (pos >= buf.length) return true;
  if (pos + 8 > buf.length) return false;
  for (let i = pos; i < pos + 4; i++) if (buf[i] < 0x20 || buf[i] > 0x7e) return false;
  return pos + 8 + buf.readUInt32LE(pos + 4) <= buf.length;
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
      // Streaming writers leave the size as 0 or 0xffffffff: take the rest of the file. So does a size
      // that stops short of samples that follow (no chunk header after it): the audio is what the file
      // holds, so a header cannot hide audio from the transcript or from billing.
      const declared = body + size;
      const end =
        size === 0 ||
        size === 0xffffffff ||
        declared > buf.length ||
        !chunkFollows(buf, declared + (size % 2))
          ? buf.length
          : declared;
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
  return decodeStream(Readable.from([isIsoBmff(input) ? faststart(input) : input]), {
    ...opts,
    inputBytes: input.length,
  });
}

export class AudioTooLongError extends Error {
  override name = 'AudioTooLongError';
  constructor(readonly maxSeconds: number) {
    super(`The audio is longer than ${maxSeconds} seconds.`);
  }
}

/** What ffmpeg reads: a stream piped to its stdin (an upload), or a file on disk (a batch download). */
type FfmpegInput = { stream: Readable } | { file: string };

/** ffmpeg's arguments: the input, 16 kHz mono PCM16LE raw to `output`. */
function ffmpegArgs(input: FfmpegInput, output: string, maxSeconds: number | undefined): string[] {
  return [
    '-hide_banner',
    '-nostats',
    // Writing to a file, ffmpeg reports its progress on stdout (every 0.5 s): the watchdog's heartbeat.
    ...(output === 'pipe:1' ? [] : ['-progress', 'pipe:1']),
    '-loglevel',
    'error',
    // Only the input, only audio containers: a playlist cannot make ffmpeg read another file or a URL.
    ...('file' in input ? ['-nostdin', ...ffmpegInputArgs('file'), '-i', input.file] : []),
    ...('stream' in input ? [...ffmpegInputArgs('pipe'), '-i', 'pipe:0'] : []),
    '-vn',
    '-sn',
    '-dn',
    '-ac',
    '1',
    '-ar',
    String(PCM_SAMPLE_RATE),
    '-acodec',
    'pcm_s16le',
    // Past the longest audio taken, ffmpeg stops: a bomb is cut off as soon as it is one.
    ...(maxSeconds === undefined ? [] : ['-t', String(maxSeconds + 0.01)]),
    '-f',
    's16le',
    '-y',
    output,
  ];
}

/**
 * Runs ffmpeg from `input` to `output` (a path or `pipe:1`); resolves with its
 * stdout chunks (for pipe:1) once it exits cleanly. `timeoutMs` is a stall
 * watchdog, not a budget: decoding fails when ffmpeg makes no progress (no
 * output, no progress report) for that long, so hours of audio on a loaded
 * machine decode, and a decoder that hangs is stopped.
 */
function runFfmpeg(
  input: FfmpegInput,
  output: string,
  opts: DecodeOptions & { inputBytes: number },
): Promise<{ chunks: Buffer[]; bytes: number }> {
  const maxBytes =
    opts.maxSeconds === undefined ? Infinity : Math.ceil(opts.maxSeconds * BYTES_PER_SECOND) + 2;
  return new Promise((resolve, reject) => {
    const cmd = boundedFfmpeg(
      opts.ffmpegPath ?? 'ffmpeg',
      ffmpegArgs(input, output, opts.maxSeconds),
      opts.inputBytes,
    );
    const stream = 'stream' in input ? input.stream : undefined;
    const ff = spawn(cmd.command, cmd.args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let stderr = '';
    let settled = false;
    const finish = (err: Error | undefined) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      stream?.unpipe(ff.stdin);
      if (err) {
        ff.kill('SIGKILL');
        reject(err);
      } else resolve({ chunks, bytes });
    };
    const onAbort = () => finish(new AudioDecodeError('Decoding was aborted.', 'decoder_unavailable'));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const stallMs = opts.timeoutMs ?? AUDIO_DECODE_TIMEOUT_MS;
    const stalled = () =>
      finish(new AudioDecodeError(`Decoding made no progress for ${stallMs} ms.`, 'decoder_unavailable'));
    let timer = setTimeout(stalled, stallMs);
    const progressed = () => {
      clearTimeout(timer);
      timer = setTimeout(stalled, stallMs);
    };
    ff.on('error', (err) =>
      finish(new AudioDecodeError(`ffmpeg could not be started: ${err.message}`, 'decoder_unavailable')),
    );
    // ffmpeg may stop reading early (bad input, or past the longest audio taken): a broken pipe is expected.
    ff.stdin.on('error', () => {});
    stream?.on('error', (err) => finish(new AudioDecodeError(`Reading the upload failed: ${err.message}`)));
    ff.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 4000) stderr += d.toString();
    });
    const toPipe = output === 'pipe:1';
    ff.stdout.on('data', (d: Buffer) => {
      if (settled) return;
      progressed();
      if (!toPipe) return; // progress lines; the samples go to the file
      chunks.push(d);
      bytes += d.length;
      if (bytes > maxBytes) finish(new AudioTooLongError(opts.maxSeconds!));
    });
    ff.on('close', (code, signal) => {
      if (code === 0) return finish(undefined);
      // Our spool's disk, not the client's file: 507 with Retry-After, never `invalid_audio`.
      if (saysDiskFull(stderr)) return finish(new InsufficientStorageError());
      const refused = ffmpegRefusal(stderr, signal, settled);
      if (refused) return finish(new AudioDecodeError(refused));
      if (code === 127)
        return finish(new AudioDecodeError('ffmpeg could not be started.', 'decoder_unavailable'));
      const last = stderr.trim().split('\n').pop() ?? '';
      // ffmpeg names its input file: the client sees `input`, never a server path.
      const detail = 'file' in input ? last.split(input.file).join('input') : last;
      finish(
        new AudioDecodeError(
          `The file could not be decoded as audio${detail ? ` (${detail.slice(0, 200)})` : ''}.`,
        ),
      );
    });
    if (stream) stream.pipe(ff.stdin);
    else ff.stdin.end(); // it reads its file
  });
}

/** Decodes a stream of any format ffmpeg reads through stdin/stdout pipes. */
export async function decodeStream(
  input: Readable,
  opts: DecodeOptions & { inputBytes?: number } = {},
): Promise<Buffer> {
  // A stream of unknown size gets the CPU bound of the largest upload (25 MiB).
  const { chunks, bytes } = await runFfmpeg({ stream: input }, 'pipe:1', {
    ...opts,
    inputBytes: opts.inputBytes ?? 25 << 20,
  });
  const pcm = Buffer.concat(chunks, bytes);
  return pcm.length % 2 ? pcm.subarray(0, pcm.length - 1) : pcm;
}

/**
 * Decoded audio that may be too long to hold in memory: the samples are in
 * `pcm` up to a spool threshold, and in a file beyond it (read back in
 * ranges). `envelope` is the energy per 10 ms frame of spooled audio.
 */
export interface DecodedAudio {
  seconds: number;
  /** The samples, when they are held in memory. */
  pcm?: Buffer;
  /** The raw PCM16 file, when the audio was spooled. */
  file?: string;
  envelope?: Float32Array;
  /** Bytes [start, end) of the samples. */
  read(start: number, end: number): Promise<Buffer>;
  /** Removes the spool file (idempotent; a no-op for audio in memory). */
  dispose(): Promise<void>;
}

export interface SpoolOptions {
  /** Audio longer than this stays in its spool file instead of memory. */
  afterSeconds: number;
  /** Where spool files go (they are removed by `dispose`, or at once for audio held in memory). */
  dir: string;
}

function inMemory(pcm: Buffer): DecodedAudio {
  return {
    seconds: pcmDurationSeconds(pcm),
    pcm,
    read: (start, end) => Promise.resolve(pcm.subarray(start, Math.min(end, pcm.length))),
    dispose: () => Promise.resolve(),
  };
}

/**
 * Decodes an uploaded file with memory bounded whatever it decodes to (a
 * small upload may hold hours of silence): ffmpeg writes the PCM to a spool
 * file, never through this process, and stops past `maxSeconds`. A clip (up
 * to `spool.afterSeconds`) is then read into memory in one piece and its file
 * removed; longer audio stays in the file, read back a range at a time, and
 * its energy envelope is computed through one reused read buffer, so the
 * process holds no more of it than a piece.
 */
export async function decodeUpload(
  input: Buffer,
  opts: DecodeOptions & { spool: SpoolOptions },
): Promise<DecodedAudio> {
  if (input.length === 0) return inMemory(Buffer.alloc(0));
  const direct = canonicalWavSamples(input);
  if (direct) {
    if (opts.maxSeconds !== undefined && pcmDurationSeconds(direct) > opts.maxSeconds) {
      throw new AudioTooLongError(opts.maxSeconds);
    }
    // Already in memory (the upload is capped in bytes): nothing to spool.
    return inMemory(direct);
  }
  const file = spoolFile(opts.spool.dir);
  const remove = () => fs.promises.rm(file, { force: true });
  try {
    await runFfmpeg({ stream: Readable.from([isIsoBmff(input) ? faststart(input) : input]) }, file, {
      ...opts,
      inputBytes: input.length,
    });
    const size = (await fs.promises.stat(file)).size;
    const usable = size - (size % 2);
    // A container that declares audio and yields none (an index too large for the memory bound, a
    // stream that is all errors) is not an empty clip; a WAV with no samples is one (interface 2.6).
    if (usable === 0 && input.toString('latin1', 0, 4) !== 'RIFF') {
      throw new AudioDecodeError('The file holds no audio that could be decoded.');
    }
    if (opts.maxSeconds !== undefined && usable > Math.ceil(opts.maxSeconds * BYTES_PER_SECOND) + 2) {
      throw new AudioTooLongError(opts.maxSeconds);
    }
    if (pcmDurationSeconds(usable) <= opts.spool.afterSeconds) {
      const pcm = await readRange(file, 0, usable);
      await remove();
      return inMemory(pcm);
    }
    const envelope = await envelopeOfFile(file, usable);
    let disposed = false;
    return {
      seconds: pcmDurationSeconds(usable),
      file,
      envelope,
      read: (start, end) => readRange(file, start, Math.min(end, usable)),
      dispose: async () => {
        if (disposed) return;
        disposed = true;
        await remove();
      },
    };
  } catch (err) {
    await remove();
    throw err;
  }
}

/** The energy envelope of the first `bytes` of a PCM file, read through one reused buffer. */
async function envelopeOfFile(file: string, bytes: number): Promise<Float32Array> {
  const env = new EnvelopeBuilder();
  const buf = Buffer.allocUnsafe(1 << 20);
  const fh = await fs.promises.open(file, 'r');
  try {
    for (let pos = 0; pos < bytes;) {
      const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, bytes - pos), pos);
      if (bytesRead === 0) break;
      // The chunk is even-sized and read in full before the buffer is reused (push keeps no reference).
      env.push(buf.subarray(0, bytesRead));
      pos += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return env.finish();
}

/**
 * Decodes an audio file on disk (a batch job's download) to raw 16 kHz mono
 * PCM16LE at `output`, under the same bounds and stall watchdog as uploads;
 * ffmpeg stops just past `maxSeconds` (the caller measures what it got).
 * Rejects with AudioDecodeError (`invalid_audio`: the file's fault;
 * `decoder_unavailable`: ffmpeg missing, stalled or aborted) or
 * InsufficientStorageError (the output's disk is full).
 */
export async function decodeFile(input: string, output: string, opts: DecodeOptions): Promise<void> {
  // A missing file is reported by ffmpeg itself.
  const inputBytes = await fs.promises.stat(input).then(
    (s) => s.size,
    () => 0,
  );
  await runFfmpeg({ file: input }, output, { ...opts, inputBytes });
}

/** Bytes [start, end) of a file (fewer when it ends first). */
export async function readRange(file: string, start: number, end: number): Promise<Buffer> {
  const length = Math.max(0, end - start);
  const buf = Buffer.alloc(length);
  const fh = await fs.promises.open(file, 'r');
  try {
    let got = 0;
    while (got < length) {
      const { bytesRead } = await fh.read(buf, got, length - got, start + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return buf.subarray(0, got);
  } finally {
    await fh.close();
  }
}
