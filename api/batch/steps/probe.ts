/**
 * Step `probe`: fetches the audio, decodes it to 16 kHz PCM in the run's
 * work folder (the original is kept only while decoding), checks it against
 * the plan (length per request, rolling audio budget) and hashes it.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { AudioDecodeError, AudioTooLongError, decodeFile } from '../../../shared/audio/index.js';
import { round3 } from '../../../shared/numbers.js';
import { fetchAudio } from '../audio.js';
import { PermanentError } from '../errors.js';
import type { RunContext } from '../run/context.js';
import { roomIn, waitForDiskRoom } from '../run/disk.js';
import { energyEnvelopeOfFile, SAMPLE_RATE } from '../../../shared/audio/slicing.js';

export interface ProbeOutput {
  duration_seconds: number;
  sample_rate: number;
  audio_bytes: number;
  content_type: string | null;
  audio_sha256: string;
  fetch_ms: number;
  decode_ms: number;
}

/** How long a batch job's budget reservation holds if nothing ends it (the job is long gone by then). */
export const BATCH_RESERVATION_TTL_SECONDS = 24 * 3600;

/** Where the decoded audio of a run is kept. */
export const pcmFileOf = (workDir: string): string => path.join(workDir, 'audio.pcm');

export async function probe(ctx: RunContext): Promise<ProbeOutput> {
  const { d, params: p, workDir, signal } = ctx;
  const { config } = d;
  const source = path.join(workDir, 'source');
  await waitForDiskRoom(config, signal);
  const fetched = await fetchAudio(d.outbound, p.audio_url, source, {
    maxBytes: config.maxAudioBytes,
    timeoutMs: config.fetchTimeoutMs,
    minRate: config.fetchMinRate,
    signal,
    roomBytes: await roomIn(workDir, config.diskFloorBytes),
  });
  const pcmFile = pcmFileOf(workDir);
  const t0 = Date.now();
  await decodeFile(source, pcmFile, {
    ffmpegPath: d.audio.ffmpegPath,
    timeoutMs: d.audio.decodeTimeoutMs,
    maxSeconds: p.max_audio_seconds,
    signal,
  }).catch((err: unknown) => {
    throw decodeFailure(err, p.max_audio_seconds);
  });
  const decodeMs = Date.now() - t0;
  await fsp.rm(source, { force: true }); // the original is kept only while decoding
  const { samples, sha256 } = await energyEnvelopeOfFile(pcmFile);
  const duration = samples / SAMPLE_RATE;
  if (samples === 0) throw new PermanentError('AudioDecodeError', 'The audio contains no samples.');
  if (duration > p.max_audio_seconds) throw tooLong(p.max_audio_seconds);
  // The plan's rolling audio budget covers batch jobs too: the job's seconds are reserved before any
  // chunk is transcribed (a resumed run's probe replaces its own reservation); the bill ends it
  // (pipeline.ts), or the workflow's end does (workflow.ts, cancel.ts).
  if (p.max_window_seconds !== undefined) {
    const decision = await ctx.reservation.reserve({
      seconds: duration,
      limit: p.max_window_seconds,
      ttlSeconds: BATCH_RESERVATION_TTL_SECONDS,
    });
    if (!decision.ok) {
      throw new PermanentError(
        'AudioQuotaExceededError',
        `The plan's audio budget of ${p.max_window_seconds} s per window would be exceeded (${Math.round(decision.used)} s used, this audio ${Math.round(duration)} s).`,
      );
    }
  }
  return {
    duration_seconds: round3(duration),
    sample_rate: SAMPLE_RATE,
    audio_bytes: fetched.bytes,
    content_type: fetched.contentType ?? null,
    audio_sha256: sha256,
    fetch_ms: fetched.ms,
    decode_ms: decodeMs,
  };
}

const tooLong = (maxSeconds: number) =>
  new PermanentError(
    'AudioTooLongError',
    `The audio is longer than the plan allows per request (${maxSeconds} s).`,
  );

/**
 * A decode failure as the workflow sees it: the file's fault (unreadable,
 * refused, too long) errors the job; ffmpeg missing, stalled or stopped is
 * retried like any transient failure; a full disk pauses the run.
 */
function decodeFailure(err: unknown, maxSeconds: number): unknown {
  if (err instanceof AudioTooLongError) return tooLong(maxSeconds);
  if (err instanceof AudioDecodeError && err.code === 'invalid_audio')
    return new PermanentError('AudioDecodeError', err.message);
  return err;
}
