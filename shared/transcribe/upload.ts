/**
 * The upload use case of `POST /v1/audio/transcriptions`, shared by the API's
 * segment route and the engine worker (engine/app.ts): multipart upload →
 * form fields → language check → decode (bounded in length and time) → the
 * caller's check of the decoded clip → speech engine.
 *
 * Every failure on the way is mapped once, here, to an `HttpRefusal` (status,
 * code, message, headers) that each tier renders in its error shape. What
 * differs between the tiers is data: the form fields each reads, the longest
 * clip and why, and who answers an engine failure (`failure`): the API for its
 * speech workers (502 `transcription_failed`, interface 7.2) or a worker for
 * itself (500).
 */
import type { Context } from 'koa';
import { AudioDecodeError, AudioTooLongError, decodeAudio, pcmDurationSeconds } from '../audio/index.js';
import { isMultipart, parseAudioUpload, UploadError } from '../audio/upload.js';
import { RESPONSE_FORMATS } from '../stt/formats.js';
import { normalizeLanguage } from '../stt/language.js';
import { SpeechError, type SpeechEngine, type TranscribeResult } from '../stt/types.js';
import { HttpRefusal } from '../http/refusal.js';

/** The form fields the engine call uses, as the tier's `fields` reads them. */
export interface ClipFields {
  language?: string;
  prompt?: string;
  model?: string;
  workerId?: string;
}

export interface ClipUpload<F extends ClipFields> {
  engine: Pick<SpeechEngine, 'languages' | 'transcribe'>;
  maxUploadBytes: number;
  audio: { ffmpegPath: string; decodeTimeoutMs: number };
  /** The longest clip taken, and the refusal's message for a longer one. */
  maxSeconds: number;
  tooLong: string;
  /** Runs once the request is known to be an upload, before it is read (the API checks it can bill). */
  accepted?(): void;
  /** Reads and checks the form's text fields (throws a HttpRefusal, or the tier's own error). */
  fields(raw: Record<string, string>): F;
  /** Runs on the decoded clip before the engine does (the API checks the plan's audio budget). */
  decoded?(seconds: number): Promise<void>;
  /** `gateway`: the engine is this process's speech workers; `worker`: this process is one. */
  failure: 'gateway' | 'worker';
}

export interface TranscribedClip<F> {
  fields: F;
  /** Seconds of decoded audio. */
  seconds: number;
  result: TranscribeResult;
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

export const NOT_MULTIPART = 'The request body must be multipart/form-data with a "file" field.';

export function invalidResponseFormat(): HttpRefusal {
  return new HttpRefusal(
    400,
    'invalid_response_format',
    `response_format must be one of ${RESPONSE_FORMATS.join(', ')}.`,
  );
}

export async function transcribeUpload<F extends ClipFields>(
  ctx: Context,
  p: ClipUpload<F>,
): Promise<TranscribedClip<F>> {
  if (!isMultipart(ctx)) throw new HttpRefusal(400, 'invalid_content_type', NOT_MULTIPART);
  p.accepted?.();
  const upload = await parseAudioUpload(ctx, p.maxUploadBytes).catch((err: unknown) => {
    throw err instanceof UploadError ? new HttpRefusal(err.status, err.code, err.message) : err;
  });
  if (!upload.file) throw new HttpRefusal(400, 'missing_file', 'The multipart field "file" is required.');
  const fields = p.fields(upload.fields);
  const language = supportedLanguage(p.engine.languages(), fields.language);

  const aborter = new AbortController();
  // The response closing before it was written means the client went away.
  ctx.res.once('close', () => !ctx.res.writableFinished && aborter.abort());
  try {
    const pcm = await decodeAudio(upload.file.data, {
      ffmpegPath: p.audio.ffmpegPath,
      timeoutMs: p.audio.decodeTimeoutMs,
      maxSeconds: p.maxSeconds,
      signal: aborter.signal,
    });
    const seconds = pcmDurationSeconds(pcm);
    await p.decoded?.(seconds);
    const result = await p.engine.transcribe({
      pcm,
      language,
      prompt: fields.prompt,
      model: fields.model,
      workerId: fields.workerId,
      signal: aborter.signal,
    });
    return { fields, seconds, result };
  } catch (err) {
    throw clipRefusal(err, p) ?? err;
  }
}

/** The one mapping of decoder and engine failures; undefined for anything else (passed on as it is). */
function clipRefusal(err: unknown, p: Pick<ClipUpload<ClipFields>, 'tooLong' | 'failure'>) {
  if (err instanceof AudioTooLongError) return new HttpRefusal(400, 'audio_too_long', p.tooLong);
  if (err instanceof AudioDecodeError) {
    if (err.code === 'invalid_audio') return new HttpRefusal(400, 'invalid_audio', err.message);
    return new HttpRefusal(503, 'decoder_unavailable', err.message, { retryable: true });
  }
  if (!(err instanceof SpeechError)) return undefined;
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
        type: 'invalid_request_error',
      });
  }
}
