/**
 * Fetching a batch recording. Long recordings never sit in memory: the
 * download streams to a temporary file, which the service's one decoder
 * (shared/audio, `decodeFile`) turns into a raw 16 kHz mono PCM16 file that
 * chunks are read from by byte range (`readRange`).
 */
import { createWriteStream, promises as fsp } from 'node:fs';
import { finished } from 'node:stream/promises';
import { InsufficientStorageError, isDiskFull } from '../../shared/disk.js';
import { OutboundClient, OutboundError } from './net/index.js';
import { PermanentError } from './errors.js';

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
