/**
 * The clip use case of `POST /v1/audio/transcriptions`, shared by the API's
 * segment route and the engine worker (engine/app.ts). The route reads the
 * upload (shared/http/upload.ts, `receiveClip`) and its own form fields,
 * then calls, in order:
 *
 * - `supportedLanguage`: the language hint the engine can serve;
 * - `decodeClip`: the audio decoded, bounded in length, time and memory
 *   (long audio is spooled to disk), at most DECODES_PER_PROCESS at once;
 * - its own checks on the decoded duration (the API reserves the plan's
 *   audio budget);
 * - `transcribeClip`: the transcript (long audio a piece at a time);
 * - `audio.dispose()`.
 *
 * Every failure on the way is mapped once, here, to an `HttpRefusal`
 * (status, code, message, headers) that each tier renders in its error
 * shape. What differs between the tiers is data: the longest clip and why,
 * and who answers an engine failure (`failure`): the API for its speech
 * workers (502 `transcription_failed`, interface 7.2) or a worker for
 * itself (500).
 */
import os from 'node:os';
import {
  AudioDecodeError,
  AudioTooLongError,
  decodeUpload,
  sweepSpool,
  type DecodedAudio,
} from '../audio/index.js';
import { RESPONSE_FORMATS } from '../stt/formats.js';
import { normalizeLanguage } from '../stt/language.js';
import {
  EngineBusyError,
  SpeechError,
  type SpeechEngine,
  type TranscribeRequest,
  type TranscribeResult,
} from '../stt/types.js';
import { HttpRefusal } from '../http/refusal.js';
import { OPENAI_ERROR_TYPES } from '../http/openaiErrors.js';
import { DISK_RETRY_AFTER_SECONDS, InsufficientStorageError, isDiskFull } from '../disk.js';
import { FairShare } from '../fairShare.js';
import { type OnPiece, type Piece, transcribePieces } from './long.js';

/**
 * Uploads decoded at once in one process (issue 22): each decode holds up to
 * SPOOL_AFTER_SECONDS of PCM in memory (and one ffmpeg), so this bounds what
 * a burst of uploads can take. Further uploads wait DECODE_QUEUE_MS for a
 * slot, then get 503 `engine_overloaded` with Retry-After.
 */
export const DECODES_PER_PROCESS = Math.max(2, os.availableParallelism());
export const DECODE_QUEUE_MS = 10_000;
/**
 * Decoded audio longer than this (3.84 MB of PCM) is spooled to disk as it is
 * decoded, and audio this long is transcribed in pieces (shared/transcribe/long.ts)
 * however it arrived: one decode of a long utterance grows the engine's search
 * with its length.
 */
export const SPOOL_AFTER_SECONDS = 120;
/** Decoders of this process, in turn between keys (a key's queued uploads do not hold another key's). */
const decodeSlots = new FairShare(DECODES_PER_PROCESS, DECODES_PER_PROCESS);

/** What a tier's refusals depend on. */
export interface ClipPolicy {
  /** The refusal's message for audio longer than the tier takes. */
  tooLong: string;
  /** `gateway`: the engine is this process's speech workers; `worker`: this process is one. */
  failure: 'gateway' | 'worker';
}

/**
 * The language hint normalised (`en-US`, `English` -> `en`; `auto` -> none),
 * refused with 400 `unsupported_language` when the engine cannot serve it.
 */
export function supportedLanguage(supported: string[], hint: string | undefined): string | undefined {
  const language = normalizeLanguage(hint);
  if (language && !supported.includes('*') && !supported.includes(language)) {
    throw new HttpRefusal(
      400,
      'unsupported_language',
      `Language "${hint}" is not supported (supported: ${supported.join(', ')}).`,
    );
  }
  return language;
}

export function invalidResponseFormat(): HttpRefusal {
  return new HttpRefusal(
    400,
    'invalid_response_format',
    `response_format must be one of ${RESPONSE_FORMATS.join(', ')}.`,
  );
}

/** Decodes an uploaded clip (the caller disposes of it), or refuses it. */
export async function decodeClip(
  file: Buffer,
  opts: ClipPolicy & {
    audio: { ffmpegPath: string; decodeTimeoutMs: number };
    /** The longest audio taken (seconds). */
    maxSeconds: number;
    /** Whose upload (the API key): decoders are handed out in turn between keys. */
    key?: string;
    signal: AbortSignal;
  },
): Promise<DecodedAudio> {
  // The wait's own timer and controller, held here until the decode settles: an AbortSignal.timeout
  // inside AbortSignal.any is only weakly held and can be collected before it fires (seen on a busy
  // machine: the wait then never ended, and an upload over the bound took a slot when one freed).
  const wait = new AbortController();
  const timer = setTimeout(
    () => wait.abort(new DOMException('decode slot wait timed out', 'TimeoutError')),
    DECODE_QUEUE_MS,
  );
  const onClientGone = () => wait.abort(opts.signal.reason);
  opts.signal.addEventListener('abort', onClientGone, { once: true });
  const waited = wait.signal;
  try {
    return await decodeSlots.run(opts.key ?? '', waited, () =>
      decodeUpload(file, {
        ffmpegPath: opts.audio.ffmpegPath,
        timeoutMs: opts.audio.decodeTimeoutMs,
        maxSeconds: opts.maxSeconds,
        signal: opts.signal,
        spool: { afterSeconds: SPOOL_AFTER_SECONDS, dir: os.tmpdir() },
      }),
    );
  } catch (err) {
    // Still waiting for a slot when the wait ran out (not the decode failing, not the client leaving).
    if (waited.aborted && err === waited.reason && !opts.signal.aborted) {
      const busy = new EngineBusyError(
        `No audio decoder became free within ${DECODE_QUEUE_MS} ms.`,
        'timeout',
      );
      throw clipRefusal(busy, opts)!;
    }
    throw clipRefusal(err, opts) ?? err;
  } finally {
    clearTimeout(timer);
    opts.signal.removeEventListener('abort', onClientGone);
  }
}

/**
 * Transcribes decoded audio: a clip in one engine call, long audio a piece
 * at a time; or refuses. With `pieces`, in those pieces, each handed to
 * `onPiece` as it is decoded (a streaming answer).
 */
export async function transcribeClip(
  engine: Pick<SpeechEngine, 'transcribe'>,
  audio: DecodedAudio,
  req: Omit<TranscribeRequest, 'pcm'>,
  policy: ClipPolicy,
  pieces?: { slices?: Piece[]; onPiece: OnPiece },
): Promise<TranscribeResult> {
  try {
    if (pieces) return await transcribePieces(engine, audio, req, pieces);
    return audio.pcm && audio.seconds <= SPOOL_AFTER_SECONDS
      ? await engine.transcribe({ ...req, pcm: audio.pcm })
      : await transcribePieces(engine, audio, req);
  } catch (err) {
    throw clipRefusal(err, policy) ?? err;
  }
}

/** The one mapping of decoder and engine failures; undefined for anything else (passed on as it is). */
function clipRefusal(err: unknown, p: ClipPolicy): HttpRefusal | undefined {
  if (err instanceof AudioTooLongError) return new HttpRefusal(400, 'audio_too_long', p.tooLong);
  // Our spool's disk is full: not the client's file. An engine worker answers 503 (its gateway then
  // tries another worker), the API 507.
  if (isDiskFull(err))
    return new HttpRefusal(
      p.failure === 'worker' ? 503 : 507,
      'insufficient_storage',
      new InsufficientStorageError().message,
      {
        retryable: true,
        headers: { 'Retry-After': String(DISK_RETRY_AFTER_SECONDS) },
      },
    );
  if (err instanceof AudioDecodeError) {
    if (err.code === 'invalid_audio') return new HttpRefusal(400, 'invalid_audio', err.message);
    return new HttpRefusal(503, 'decoder_unavailable', err.message, {
      retryable: true,
      headers: { 'Retry-After': p.failure === 'gateway' ? '2' : '1' },
    });
  }
  if (!(err instanceof SpeechError)) return undefined;
  // Waiting for a decoder, or a decode past its limit on cores shared by more work than they hold: the
  // engine is up but behind. That is overload (retry shortly), not a failed transcription.
  if (err instanceof EngineBusyError)
    return new HttpRefusal(503, 'engine_overloaded', err.message, {
      retryable: true,
      headers: { 'Retry-After': p.failure === 'gateway' ? '2' : '1' },
    });
  switch (err.code) {
    case 'unsupported_language':
    case 'unknown_worker':
      return new HttpRefusal(400, err.code, err.message);
    case 'aborted':
      // The client went away; nobody reads this answer, the log line records it (nginx's 499).
      return new HttpRefusal(499, 'client_closed_request', err.message);
    case 'engine_overloaded':
      return new HttpRefusal(503, err.code, err.message, {
        retryable: true,
        headers: { 'Retry-After': p.failure === 'gateway' ? '2' : '1' },
      });
    default:
      if (p.failure === 'worker') return new HttpRefusal(500, 'transcription_failed', err.message);
      // Interface 7.2: all worker attempts failed.
      return new HttpRefusal(502, 'transcription_failed', `Transcription failed: ${err.message}`, {
        retryable: true,
        type: OPENAI_ERROR_TYPES.request,
      });
  }
}

/**
 * At process start: removes decode spool files left in the temp directory by
 * a process killed mid-decode (shared/audio/spool.ts), logging what it freed.
 */
export async function sweepDecodeSpool(log: { info(o: object, msg: string): void }): Promise<void> {
  const swept = await sweepSpool(os.tmpdir());
  if (swept.files) log.info(swept, 'removed decode spool files left by a stopped process');
}
