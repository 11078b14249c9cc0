/**
 * Fetching and decoding a batch recording. Long recordings never sit in
 * memory: the download streams to a temporary file and ffmpeg decodes it to a
 * raw 16 kHz mono PCM16 file that chunks are read from by byte range.
 */
import { spawn } from 'node:child_process';
import { createWriteStream, promises as fsp, statSync } from 'node:fs';
import { finished } from 'node:stream/promises';
import { InsufficientStorageError, isDiskFull, saysDiskFull } from '../../shared/disk.js';
import { boundedFfmpeg, ffmpegInputArgs, ffmpegRefusal } from '../../shared/audio/ffmpeg.js';
import { OutboundClient, OutboundError } from './net/index.js';
import { PermanentError, withoutPaths } from './errors.js';

export interface FetchedAudio {
  file: string;
  bytes: number;
  contentType: string | undefined;
  finalUrl: string;
  ms: number;
}

export async function fetchAudio(
  client: OutboundClient,
  url: string,
  file: string,
  opts: {
    maxBytes: number;
    timeoutMs: number;
    minRate?: { bytes: number; windowMs: number };
    signal?: AbortSignal;
    /** Free space for the download (beyond the disk floor): a larger declared body is not fetched. */
    roomBytes?: number;
  },
): Promise<FetchedAudio> {
  const started = Date.now();
  const sink = createWriteStream(file);
  // A failed write (ENOSPC) must reach this call, never the process as an unhandled 'error'.
  let sinkError: Error | undefined;
  sink.on('error', (err) => (sinkError ??= err));
  try {
    const res = await client.request(url, {
      maxBytes: opts.maxBytes,
      timeoutMs: opts.timeoutMs,
      minRate: opts.minRate,
      sink,
      sinkRoomBytes: opts.roomBytes,
      signal: opts.signal,
    });
    sink.end();
    await finished(sink);
    if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
      throw new PermanentError('AudioFetchError', `Fetching audio_url answered HTTP ${res.status}.`);
    }
    if (res.status < 200 || res.status >= 300)
      throw new Error(`Fetching audio_url answered HTTP ${res.status}.`);
    if (res.bytes === 0) throw new PermanentError('AudioFetchError', 'audio_url returned an empty body.');
    return {
      file,
      bytes: res.bytes,
      contentType: res.headers['content-type'],
      finalUrl: res.url,
      ms: Date.now() - started,
    };
  } catch (caught) {
    sink.destroy();
    const err = sinkError ?? caught;
    if (isDiskFull(err)) {
      // Nothing half-written is kept: the next run downloads again once there is room.
      await fsp.rm(file, { force: true }).catch(() => {});
      throw err instanceof InsufficientStorageError
        ? err
        : new InsufficientStorageError('The server has no disk space left to download the audio.');
    }
    if (err instanceof OutboundError && err.code !== 'network_error' && err.code !== 'timeout') {
      throw new PermanentError('AudioFetchError', `Fetching audio_url failed: ${err.message}`);
    }
    throw err;
  }
}

/** ffmpeg: any input file to raw PCM16LE 16 kHz mono, stopping just past maxSeconds. */
export function decodeToPcmFile(
  input: string,
  output: string,
  opts: { ffmpegPath: string; timeoutMs: number; maxSeconds: number; signal?: AbortSignal },
): Promise<void> {
  return new Promise((resolve, reject) => {
    let inputBytes = 0;
    try {
      inputBytes = statSync(input).size;
    } catch {
      // ffmpeg reports the missing file itself
    }
    const cmd = boundedFfmpeg(
      opts.ffmpegPath,
      [
        '-hide_banner',
        '-nostdin',
        '-nostats',
        '-loglevel',
        'error',
        '-y',
        // Only this file, only audio containers: a playlist cannot make ffmpeg read another file or a URL.
        ...ffmpegInputArgs('file'),
        '-i',
        input,
        '-vn',
        '-sn',
        '-dn',
        '-t',
        String(Math.ceil(opts.maxSeconds) + 1),
        '-ac',
        '1',
        '-ar',
        '16000',
        '-acodec',
        'pcm_s16le',
        '-f',
        's16le',
        output,
      ],
      inputBytes,
    );
    const ff = spawn(cmd.command, cmd.args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let killed = false;
    const kill = () => {
      killed = true;
      ff.kill('SIGKILL');
    };
    let stderr = '';
    ff.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 4000) stderr += d.toString();
    });
    const timer = setTimeout(kill, opts.timeoutMs);
    const onAbort = kill;
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    ff.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`ffmpeg could not start: ${err.message}`));
    });
    ff.on('close', (code, signal) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      if (code === 0) return resolve();
      // The work folder's disk is full: the job pauses (it is not the audio's fault).
      if (saysDiskFull(stderr)) return reject(new InsufficientStorageError());
      const refused = ffmpegRefusal(stderr, signal, killed);
      if (refused)
        return reject(new PermanentError('AudioDecodeError', `The audio could not be decoded: ${refused}`));
      if (code === 127) return reject(new Error('ffmpeg could not start.'));
      if (signal) return reject(new Error(`ffmpeg was stopped (${signal}).`));
      reject(
        new PermanentError(
          'AudioDecodeError',
          `The audio could not be decoded: ${withoutPaths(
            (stderr.trim().split('\n').pop() || 'unknown error').split(input).join('input'),
          )}`,
        ),
      );
    });
  });
}

/** Reads [start, end) bytes of a file. */
export async function readRange(file: string, start: number, end: number): Promise<Buffer> {
  const handle = await fsp.open(file, 'r');
  try {
    const buf = Buffer.alloc(Math.max(0, end - start));
    let off = 0;
    while (off < buf.length) {
      const { bytesRead } = await handle.read(buf, off, buf.length - off, start + off);
      if (bytesRead === 0) break;
      off += bytesRead;
    }
    return off === buf.length ? buf : buf.subarray(0, off);
  } finally {
    await handle.close();
  }
}
