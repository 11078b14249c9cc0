/**
 * The native realtime protocol's messages as types (interface 2.7, 4.8, 4.9,
 * 6.1; docs/realtime.md, "Events"): what a client sends and what the server
 * sends, each a union discriminated by `type`, so that the session and the
 * dialects (protocol.ts builds these events, openai.ts presents them) read
 * and write fields without casts. Types only say what is on the wire; the
 * order of the fields is the builders' (protocol.ts), unchanged.
 */
import type { Eagerness } from '../shared/config/realtime.js';
import type { StopReason } from './vad/segmenter.js';

// ---- client to server ----------------------------------------------------------------------

/** A text frame once parsed: a JSON object with a non-empty string `type`, nothing else checked. */
export type JsonMessage = { type: string } & Record<string, unknown>;

/**
 * `session.update`: the options of 4.9 at the top level or under `session`, any others
 * (stripped and listed in `session.updated.ignored_fields`); validated by options.ts.
 */
export type SessionUpdateMessage = { type: 'session.update' } & Record<string, unknown>;

/** Client messages of the native protocol; fields other than `type` are checked where they are read. */
export type NativeClientMessage =
  | SessionUpdateMessage
  | { type: 'input_audio_buffer.append'; audio?: unknown }
  /** `flush` is the interface's alias. */
  | { type: 'input_audio_buffer.flush' | 'flush' };

/**
 * A guard for the messages of a dialect, from their `type`s (the record lists each type of the
 * union once, so the two cannot drift apart). Sound because a message's other fields are typed
 * `unknown` (or optional): any object with such a `type` is one.
 */
export const messageGuard =
  <M extends JsonMessage>(types: { [T in M['type']]: true }) =>
  (m: JsonMessage): m is M =>
    Object.hasOwn(types, m.type);

export const isNativeClientMessage = messageGuard<NativeClientMessage>({
  'session.update': true,
  'input_audio_buffer.append': true,
  'input_audio_buffer.flush': true,
  flush: true,
});

// ---- server to client ----------------------------------------------------------------------

export const COMPLETED = 'conversation.item.input_audio_transcription.completed';

/** A commit that ended no utterance (nothing audible since the last turn): only the OpenAI dialect presents it. */
export const COMMIT_EMPTY = 'input_audio_buffer.commit_empty';

/** The fixed audio format of the native protocol (2.7). */
export interface NativeAudio {
  format: 'pcm_s16le';
  sample_rate: number;
  channels: 1;
}

export interface SessionLimits {
  max_concurrent_utterances: number;
  max_session_seconds: number;
  idle_timeout_seconds: number;
  remaining_audio_seconds: number;
}

/** The effective settings as `session.created` and `session.updated` report them (snake_case). */
export interface PresentedSettings {
  language: string;
  prompt: string | null;
  backend: string | null;
  stt_model: string | null;
  normalizer_model: string | null;
  translate_to: string | null;
  vad: boolean;
  vad_threshold: number;
  vad_silence_ms: number;
  vad_prefix_ms: number;
  vad_min_speech_ms: number;
  vad_target_speech_ms: number;
  vad_max_speech_ms: number;
  vad_smart_split_window_ms: number;
  vad_eagerness: Eagerness | null;
}

export interface SessionCreated {
  type: 'session.created';
  request_id: string;
  session_id: string;
  audio: NativeAudio;
  turn_detection: { type: 'server_vad' };
  plan: string;
  limits: SessionLimits;
  session: PresentedSettings;
}

export interface SessionUpdated {
  type: 'session.updated';
  request_id: string;
  session_id: string;
  session: PresentedSettings;
  audio: NativeAudio;
  ignored_fields: string[];
}

export interface SpeechStarted {
  type: 'input_audio_buffer.speech_started';
  utterance_index: number;
  audio_start_ms: number;
}

export interface SpeechStopped {
  type: 'input_audio_buffer.speech_stopped';
  utterance_index: number;
  /** `session_closed`: the server closed the session abruptly with the utterance open. */
  reason: StopReason | 'session_closed';
  audio_start_ms: number;
  audio_end_ms: number;
}

/** The fields of an utterance's `completed` known before the engine answers. */
export interface CompletedBase {
  type: typeof COMPLETED;
  utterance_index: number;
  /** The language the utterance was sent with ('' for detection); the engine's once it answers. */
  language: string;
  audio_duration_ms: number;
  speech_duration_ms: number;
}

export interface CompletedWord {
  word: string;
  /** Seconds from the session's first sample. */
  start: number;
  end: number;
  confidence: number;
}

/** A transcribed utterance. */
export interface Completed extends CompletedBase {
  text: string;
  latency_ms: number;
  words: CompletedWord[];
  error?: undefined;
}

/** A failed utterance's `completed` (after its `error` event): no words, the error instead. */
export interface FailedCompleted extends CompletedBase {
  text: '';
  latency_ms: number;
  error: { code: 'transcription_failed'; message: string };
}

/**
 * `error`: a client mistake (`field` names a rejected session option), or a failed
 * transcription (`utterance_index`, `upstream_code`), which its failed `completed` follows.
 */
export interface ErrorEvent {
  type: 'error';
  code: string;
  message: string;
  field?: string;
  utterance_index?: number;
  upstream_code?: string;
}

export interface Throttled {
  type: 'service.throttled';
  reason: 'max_concurrent_utterances' | 'upstream_backpressure';
  dropped_bytes: number;
  dropped_ms: number;
  in_flight_utterances: number;
  in_flight_bytes: number;
  max_concurrent_utterances: number;
}

/** Events the native protocol sends. */
export type NativeServerEvent =
  | SessionCreated
  | SessionUpdated
  | SpeechStarted
  | SpeechStopped
  | Completed
  | FailedCompleted
  | ErrorEvent
  | Throttled;

/**
 * What a session emits: the native events, and two that only the OpenAI dialect's commands cause
 * (a commit that ended nothing, a clear), which only it presents.
 */
export type SessionEvent =
  NativeServerEvent | { type: typeof COMMIT_EMPTY } | { type: 'input_audio_buffer.cleared' };
