/**
 * OpenAI's Realtime protocol for transcription sessions (`WS /v1/realtime`) as
 * types: the client events openai.ts reads and the server events it sends,
 * each a union discriminated by `type`, in both forms (the current one and
 * the beta `transcription_session.*`). Field by field: README, "OpenAI
 * Realtime endpoint"; the order of the fields is openai.ts's, unchanged.
 */
import type { Eagerness } from '../shared/config/realtime.js';
import { COMPLETED, messageGuard, type Throttled } from './wire.js';

// ---- client to server ----------------------------------------------------------------------

/** Every client event may carry an `event_id`, which OpenAI's errors name. */
type Client<T extends string, F = unknown> = { type: T; event_id?: unknown } & F;

/**
 * Client events served here. Fields other than `type` are checked where they are read;
 * `session` holds either form's session object (openai.ts reads it field by field).
 */
export type OpenAIClientEvent =
  | Client<'session.update' | 'transcription_session.update', { session?: unknown }>
  | Client<'input_audio_buffer.append', { audio?: unknown }>
  | Client<'input_audio_buffer.commit' | 'input_audio_buffer.clear'>;

export const isOpenAIClientEvent = messageGuard<OpenAIClientEvent>({
  'session.update': true,
  'transcription_session.update': true,
  'input_audio_buffer.append': true,
  'input_audio_buffer.commit': true,
  'input_audio_buffer.clear': true,
});

// ---- server to client ----------------------------------------------------------------------

export interface OpenAITranscription {
  model: string | null;
  /** null: detection. */
  language: string | null;
  prompt: string;
}

/** null: turn detection off (the native `vad: false`). */
export type OpenAITurnDetection =
  | null
  | { type: 'semantic_vad'; eagerness: Eagerness }
  | { type: 'server_vad'; threshold: number; prefix_padding_ms: number; silence_duration_ms: number };

export interface NoiseReduction {
  type: string;
}

/** The session object of the current form (`session.created`, `session.updated`). */
export interface GaSession {
  type: 'transcription';
  id: string;
  object: 'realtime.transcription_session';
  audio: {
    input: {
      format: { type: 'audio/pcm'; rate: 16000 | 24000 };
      transcription: OpenAITranscription;
      noise_reduction: NoiseReduction | null;
      turn_detection: OpenAITurnDetection;
    };
  };
  include: string[];
}

/** The session object of the beta form (`transcription_session.created`, `.updated`). */
export interface BetaSession {
  id: string;
  object: 'realtime.transcription_session';
  input_audio_format: 'pcm16';
  input_audio_transcription: OpenAITranscription;
  turn_detection: OpenAITurnDetection;
  input_audio_noise_reduction: NoiseReduction | null;
  include: string[];
  modalities: ['text'];
  client_secret: null;
}

/** Every server event carries its own `event_id`. */
type Server<T extends string, F = unknown> = { type: T; event_id: string } & F;

export type OpenAIServerEvent =
  | Server<'session.created' | 'session.updated', { session: GaSession }>
  | Server<'transcription_session.created' | 'transcription_session.updated', { session: BetaSession }>
  | Server<'input_audio_buffer.speech_started', { audio_start_ms: number; item_id: string }>
  | Server<'input_audio_buffer.speech_stopped', { audio_end_ms: number; item_id: string }>
  | Server<
      'input_audio_buffer.committed',
      { previous_item_id: string | null; item_id: string; audio_start_ms: number; audio_end_ms: number }
    >
  | Server<
      'conversation.item.input_audio_transcription.delta',
      { item_id: string; content_index: 0; delta: string }
    >
  | Server<
      typeof COMPLETED,
      {
        item_id: string;
        content_index: 0;
        transcript: string;
        usage: { type: 'duration'; seconds: number };
      }
    >
  | Server<
      'conversation.item.input_audio_transcription.failed',
      {
        item_id: string;
        content_index: 0;
        error: { type: 'server_error'; code: string; message: string; param: null };
      }
    >
  | Server<
      'error',
      {
        error: {
          type: 'invalid_request_error';
          code: string;
          message: string;
          /** The OpenAI field of a rejected session option. */
          param: string | null;
          /** The client event refused. */
          event_id: string | null;
        };
      }
    >
  | Server<'input_audio_buffer.cleared'>
  /** An extension: audio dropped (docs/realtime.md), the native event with an `event_id`. */
  | (Throttled & { event_id: string });
