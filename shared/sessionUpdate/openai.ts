/**
 * An OpenAI transcription session as the native `session.update` it
 * amounts to, in either form OpenAI published (the current `session` with
 * `type: "transcription"` and `audio.input`; the beta one with
 * `input_audio_format` and `input_audio_transcription`), and the choices the
 * native settings do not hold (audio rate, model name, noise reduction,
 * include). The one reader of that shape: `session.update` on
 * `WS /v1/realtime` (realtime/openai.ts) and the secret endpoints that echo a
 * session before the client connects (api/routes/tokens/openai.ts), so both
 * refuse the same things with the same codes.
 */
import { PRINTABLE_TEXT, isObject } from '../validation.js';

/** The form a session or update came in (and is answered in). */
export type Form = 'ga' | 'beta';

/** What the client chose that the native settings do not hold. */
export interface OpenAIChoices {
  rate: 16000 | 24000;
  model: string | null;
  noiseReduction: { type: string } | null;
  include: string[];
}

/** A refused session: its code, message and, for one field, that field's path in the client's form. */
export interface SessionRefusal {
  code: string;
  message: string;
  field?: string;
}

export type ReadSession =
  | { ok: true; native: Record<string, unknown>; choices: Partial<OpenAIChoices> }
  | ({ ok: false } & SessionRefusal);

/** Native setting names to the OpenAI field that sets them, per form (error `param`s). */
const PARAMS: Record<string, Record<Form, string>> = {
  language: {
    ga: 'session.audio.input.transcription.language',
    beta: 'session.input_audio_transcription.language',
  },
  prompt: {
    ga: 'session.audio.input.transcription.prompt',
    beta: 'session.input_audio_transcription.prompt',
  },
  vad_threshold: {
    ga: 'session.audio.input.turn_detection.threshold',
    beta: 'session.turn_detection.threshold',
  },
  vad_silence_ms: {
    ga: 'session.audio.input.turn_detection.silence_duration_ms',
    beta: 'session.turn_detection.silence_duration_ms',
  },
  vad_prefix_ms: {
    ga: 'session.audio.input.turn_detection.prefix_padding_ms',
    beta: 'session.turn_detection.prefix_padding_ms',
  },
  vad_eagerness: {
    ga: 'session.audio.input.turn_detection.eagerness',
    beta: 'session.turn_detection.eagerness',
  },
};

/**
 * The field of the client's form that sets the native setting `field` (an error's `param`), under
 * `root` (the session's path in the client's request); the native name when no OpenAI field sets it.
 */
export function openAIParam(field: string, form: Form, root = 'session'): string {
  const path = PARAMS[field]?.[form];
  return path ? root + path.slice('session'.length) : field;
}

const PRINTABLE = new RegExp(PRINTABLE_TEXT, 'u');
const OBJECT = 'must be an object';

const refuse = (code: string, message: string): ReadSession => ({ ok: false, code, message });
const badField = (at: string, what: string): ReadSession => ({
  ok: false,
  code: 'invalid_session_update',
  message: `${at} ${what}.`,
  field: at,
});

/**
 * Reads `session` (an update's or a secret request's) in `form`: the native fields it sets (names of
 * the native `session.update`, their values checked there) and the OpenAI-only choices it makes.
 * `root` is the session's path in the client's request, for messages and `field`.
 */
export function readOpenAISession(session: unknown, form: Form, root = 'session'): ReadSession {
  if (!isObject(session)) return refuse('invalid_session_update', `"${root}" must be an object.`);
  const choices: Partial<OpenAIChoices> = {};
  const native: Record<string, unknown> = {};
  let transcription: unknown;
  let turn: unknown;
  let hasTurn = false;
  let noise: unknown;
  if (form === 'ga') {
    if (session.type !== undefined && session.type !== 'transcription') {
      return refuse(
        'unsupported_session_type',
        `${root}.type ${JSON.stringify(session.type).slice(0, 32)} is not served here: only "transcription".`,
      );
    }
    if (session.audio !== undefined && !isObject(session.audio)) return badField(`${root}.audio`, OBJECT);
    const audio = isObject(session.audio) ? session.audio : {};
    if (audio.input !== undefined && !isObject(audio.input)) return badField(`${root}.audio.input`, OBJECT);
    const input = isObject(audio.input) ? audio.input : {};
    if (input.format !== undefined) {
      const f = input.format;
      if (!isObject(f) || f.type !== 'audio/pcm')
        return refuse(
          'unsupported_audio_format',
          'audio.input.format: only {type: "audio/pcm"} is supported.',
        );
      if (f.rate !== undefined && f.rate !== 24000 && f.rate !== 16000)
        return refuse('unsupported_audio_format', 'audio.input.format.rate must be 24000 or 16000.');
      choices.rate = f.rate ?? 24000;
    }
    transcription = input.transcription;
    hasTurn = 'turn_detection' in input;
    turn = input.turn_detection;
    noise = input.noise_reduction;
  } else {
    if (session.input_audio_format !== undefined) {
      if (session.input_audio_format !== 'pcm16')
        return refuse('unsupported_audio_format', 'input_audio_format: only "pcm16" (24 kHz) is supported.');
      choices.rate = 24000;
    }
    transcription = session.input_audio_transcription;
    hasTurn = 'turn_detection' in session;
    turn = session.turn_detection;
    noise = session.input_audio_noise_reduction;
  }
  if (transcription !== undefined && transcription !== null) {
    // The field as the client's form names it.
    const at = form === 'ga' ? `${root}.audio.input.transcription` : `${root}.input_audio_transcription`;
    if (!isObject(transcription)) return badField(at, OBJECT);
    if (transcription.model !== undefined) {
      // Values are checked, never converted: `{"toString": null}` cannot become a string.
      if (transcription.model !== null && typeof transcription.model !== 'string')
        return badField(`${at}.model`, 'must be a string or null');
      if (typeof transcription.model === 'string' && !PRINTABLE.test(transcription.model))
        return badField(`${at}.model`, 'must not contain control, invisible or text-direction characters');
      choices.model = transcription.model;
    }
    // '' is OpenAI's "not set": detection.
    if (transcription.language !== undefined) native.language = transcription.language || 'auto';
    if (transcription.prompt !== undefined) native.prompt = transcription.prompt;
  }
  if (hasTurn) {
    if (turn === null) native.vad = false;
    else if (isObject(turn) && turn.type === 'semantic_vad') {
      // OpenAI's levels are the native vad_eagerness (validated there; absent: auto).
      native.vad = true;
      native.vad_eagerness = turn.eagerness ?? 'auto';
    } else if (!isObject(turn) || (turn.type !== undefined && turn.type !== 'server_vad')) {
      return refuse(
        'unsupported_turn_detection',
        'turn_detection: only {type: "server_vad"}, {type: "semantic_vad"} or null is supported.',
      );
    } else {
      // server_vad: a fixed silence window (silence_duration_ms, or the fixed default).
      native.vad = true;
      native.vad_eagerness = null;
      if (turn.threshold !== undefined) native.vad_threshold = turn.threshold;
      if (turn.silence_duration_ms !== undefined) native.vad_silence_ms = turn.silence_duration_ms;
      if (turn.prefix_padding_ms !== undefined) native.vad_prefix_ms = turn.prefix_padding_ms;
    }
  }
  if (noise === null) choices.noiseReduction = null;
  else if (isObject(noise) && typeof noise.type === 'string') choices.noiseReduction = { type: noise.type };
  else if (noise !== undefined)
    return refuse('invalid_session_update', 'noise_reduction must be null or {type: string}.');
  if (session.include !== undefined) {
    const include = session.include ?? [];
    if (!Array.isArray(include) || !include.every((v): v is string => typeof v === 'string'))
      return refuse('invalid_session_update', 'include must be an array of strings.');
    choices.include = include;
  }
  return { ok: true, native, choices };
}
