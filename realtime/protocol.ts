/**
 * The native realtime protocol (interface 4.8, 6.1): a client frame becomes a
 * typed command, and the server's events are built here with their fields in
 * the order they have always been sent. No state: the session
 * (realtime/session.ts) decides what a command does and when an event goes
 * out.
 */
import { PCM_SAMPLE_RATE } from '../shared/audio/pcm.js';
import type { TranscriptWord } from '../shared/stt/types.js';
import { decodeBase64 } from './kernel.js';
import { isObject } from '../shared/validation.js';
import {
  COMPLETED,
  isNativeClientMessage,
  type CompletedBase,
  type Completed,
  type ErrorEvent,
  type FailedCompleted,
  type JsonMessage,
  type NativeAudio,
  type PresentedSettings,
  type SessionCreated,
  type SessionEvent,
  type SessionLimits,
  type SessionUpdated,
  type SessionUpdateMessage,
  type SpeechStarted,
  type SpeechStopped,
  type Throttled,
} from './wire.js';

/** What one client frame asks for. */
export type ClientCommand =
  | { kind: 'audio'; pcm: Buffer }
  | { kind: 'update'; msg: SessionUpdateMessage }
  | { kind: 'flush' }
  /** OpenAI dialect: end the turn now (a flush that reports an empty buffer). */
  | { kind: 'commit' }
  /** OpenAI dialect: drop the audio of the open turn (no transcript). */
  | { kind: 'clear' }
  /** A client mistake: an `error` event, the session stays open. */
  | { kind: 'invalid'; code: string; message: string; field?: string }
  /** A frame above the frame limit: an `error` event, then close 1009. */
  | { kind: 'tooLarge'; size: number };

/** Why the VAD is flushed: the native flush (and a closing session), an OpenAI commit, an OpenAI clear. */
export type FlushPurpose = 'flush' | 'commit' | 'discard';

const invalid = (code: string, message: string): ClientCommand => ({ kind: 'invalid', code, message });

/** A binary frame: raw PCM16LE. */
export function parseBinary(data: ArrayBuffer, maxFrameBytes: number): ClientCommand {
  if (data.byteLength > maxFrameBytes) return { kind: 'tooLarge', size: data.byteLength };
  if (data.byteLength % 2 !== 0) {
    return invalid('invalid_audio', 'Audio frames must hold whole 16-bit samples (an even number of bytes).');
  }
  return { kind: 'audio', pcm: Buffer.from(data) };
}

const hasType = (m: Record<string, unknown>): m is JsonMessage => typeof m.type === 'string' && m.type !== '';

/** A text frame's JSON object, or the command that refuses it (too large, not JSON, not an object). */
export function parseJsonFrame(
  text: string,
  maxFrameBytes: number,
  /** The message type whose size is measured by its decoded audio instead of its text. */
  appendType: string,
): { msg: JsonMessage } | { refused: ClientCommand } {
  // No message is larger than an append carrying a whole frame of audio in base64.
  if (text.length > Math.ceil(maxFrameBytes / 3) * 4 + 1024)
    return { refused: { kind: 'tooLarge', size: text.length } };
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    return { refused: invalid('invalid_json', 'Text frames must be JSON objects.') };
  }
  if (!isObject(msg)) {
    return { refused: invalid('invalid_json', 'Text frames must be JSON objects.') };
  }
  // Frames other than audio are held to the frame limit too (appends are measured by their audio).
  if (text.length > maxFrameBytes && msg.type !== appendType)
    return { refused: { kind: 'tooLarge', size: text.length } };
  if (!hasType(msg)) return { refused: invalid('missing_type', 'Messages must carry a "type".') };
  return { msg };
}

const APPEND_HEAD = Buffer.from('{"type":"input_audio_buffer.append","audio":"', 'latin1');
const APPEND_TAIL = Buffer.from('"}', 'latin1');

/**
 * The audio of a text frame that is an append exactly as client libraries serialise it
 * (`{"type":"input_audio_buffer.append","audio":"..."}`, nothing else), as the frame's own bytes:
 * most text frames of a stream are these, and they are read without making a string of them or
 * parsing JSON. Null for any other frame. The caller takes the audio only if it is strict base64
 * (its characters need no JSON escaping, so the frame is valid JSON and means exactly this);
 * anything else goes through the full parser, which gives the same refusal it always did.
 */
export function appendAudioBytes(frame: Uint8Array): Uint8Array | null {
  const end = frame.length - APPEND_TAIL.length;
  if (end < APPEND_HEAD.length) return null;
  for (let i = 0; i < APPEND_HEAD.length; i++) if (frame[i] !== APPEND_HEAD[i]) return null;
  for (let i = 0; i < APPEND_TAIL.length; i++) if (frame[end + i] !== APPEND_TAIL[i]) return null;
  return frame.subarray(APPEND_HEAD.length, end);
}

/** The samples of a text frame that is an append of strict base64 whole samples within the limit, else null. */
export function fastAppend(frame: Uint8Array, maxFrameBytes: number): Buffer | null {
  const audio = appendAudioBytes(frame);
  if (!audio) return null;
  const pcm = decodeBase64(audio, maxFrameBytes);
  return pcm && pcm.length % 2 === 0 ? pcm : null;
}

/** A text frame of the native protocol. */
export function parseText(text: string, maxFrameBytes: number): ClientCommand {
  const parsed = parseJsonFrame(text, maxFrameBytes, 'input_audio_buffer.append');
  if ('refused' in parsed) return parsed.refused;
  const m = parsed.msg;
  if (!isNativeClientMessage(m))
    return invalid('unknown_type', `Unknown message type "${m.type.slice(0, 64)}".`);
  switch (m.type) {
    case 'session.update':
      return { kind: 'update', msg: m };
    case 'input_audio_buffer.append':
      return parseAppend(m.audio, maxFrameBytes);
    case 'input_audio_buffer.flush':
    case 'flush':
      return { kind: 'flush' };
  }
}

/** Where transient appends decode (grown to the largest frame; one per process: the event loop is single). */
let scratch = Buffer.alloc(0);

/**
 * The `audio` of an append (base64 PCM16LE, at most a frame once decoded) as PCM.
 * `transient`: decoded into a scratch buffer that the next transient append overwrites, for a
 * caller that copies the samples at once (the OpenAI endpoint's resampler): no buffer per frame.
 */
export function parseAppend(audio: unknown, maxFrameBytes: number, transient = false): ClientCommand {
  if (typeof audio !== 'string') return invalid('invalid_audio', '"audio" must be a base64 string.');
  const b64 = audio;
  // Decoded size is known before decoding: refuse oversized frames without allocating them.
  const decodedLen = Math.floor((b64.length * 3) / 4);
  if (decodedLen > maxFrameBytes + 3) return { kind: 'tooLarge', size: decodedLen };
  // Strict base64 without a pass over the text in JS: Node's decoder skips characters outside
  // the alphabet (and stops at padding), so any such character leaves the decoded length short
  // of what the text's length promises; the base64url characters it also accepts are refused apart.
  if (b64.length % 4 !== 0) return invalid('invalid_audio', '"audio" is not valid base64.');
  let buf: Buffer;
  if (transient) {
    if (scratch.length < decodedLen) scratch = Buffer.allocUnsafeSlow(decodedLen);
    buf = scratch.subarray(0, scratch.write(b64, 0, decodedLen, 'base64'));
  } else {
    buf = Buffer.from(b64, 'base64');
  }
  const pad = b64.endsWith('==') ? 2 : b64.endsWith('=') ? 1 : 0;
  if (buf.length !== (b64.length / 4) * 3 - pad || b64.includes('-') || b64.includes('_')) {
    return invalid('invalid_audio', '"audio" is not valid base64.');
  }
  if (buf.length > maxFrameBytes) return { kind: 'tooLarge', size: buf.length };
  if (buf.length % 2 !== 0) {
    return invalid('invalid_audio', 'Audio must hold whole 16-bit samples (an even number of bytes).');
  }
  return { kind: 'audio', pcm: buf };
}

export const frameTooLargeMessage = (size: number, maxFrameBytes: number): string =>
  `Frame of ${size} bytes exceeds the frame limit of ${maxFrameBytes} bytes.`;

/** How a session speaks to its client: frames to commands, the session's events to what is sent. */
export interface SessionProtocol {
  /** A text frame read from its bytes without decoding it, when it is an append of valid audio; else null. */
  parseAppendFrame(frame: Uint8Array, maxFrameBytes: number): ClientCommand | null;
  parseText(text: string, maxFrameBytes: number): ClientCommand;
  parseBinary(data: ArrayBuffer, maxFrameBytes: number): ClientCommand;
  /** The frames sent for one of the session's (native) events; absent: the event as it is. */
  present?(ev: SessionEvent): { type: string }[];
}

export const NATIVE_PROTOCOL: SessionProtocol = {
  parseAppendFrame(frame, maxFrameBytes) {
    const pcm = fastAppend(frame, maxFrameBytes);
    return pcm ? { kind: 'audio', pcm } : null;
  },
  parseText,
  parseBinary,
};

// ---- server events ----------------------------------------------------------------------------

/** The fixed audio format of the native protocol (2.7). */
export const nativeAudio = (): NativeAudio => ({
  format: 'pcm_s16le',
  sample_rate: PCM_SAMPLE_RATE,
  channels: 1,
});

export const events = {
  sessionCreated: (o: {
    requestId: string;
    sessionId: string;
    plan: string;
    limits: SessionLimits;
    session: PresentedSettings;
  }): SessionCreated => ({
    type: 'session.created',
    request_id: o.requestId,
    session_id: o.sessionId,
    audio: nativeAudio(),
    turn_detection: { type: 'server_vad' },
    plan: o.plan,
    limits: o.limits,
    session: o.session,
  }),

  sessionUpdated: (o: {
    requestId: string;
    sessionId: string;
    session: PresentedSettings;
    ignored: string[];
  }): SessionUpdated => ({
    type: 'session.updated',
    request_id: o.requestId,
    session_id: o.sessionId,
    session: o.session,
    audio: nativeAudio(),
    ignored_fields: o.ignored,
  }),

  speechStarted: (index: number, audioStartMs: number): SpeechStarted => ({
    type: 'input_audio_buffer.speech_started',
    utterance_index: index,
    audio_start_ms: audioStartMs,
  }),

  speechStopped: (
    index: number,
    reason: SpeechStopped['reason'],
    audioStartMs: number,
    audioEndMs: number,
  ): SpeechStopped => ({
    type: 'input_audio_buffer.speech_stopped',
    utterance_index: index,
    reason,
    audio_start_ms: audioStartMs,
    audio_end_ms: audioEndMs,
  }),

  /** The fields of an utterance's `completed` known before the engine answers. */
  completedBase: (index: number, language: string, audioMs: number, speechMs: number): CompletedBase => ({
    type: COMPLETED,
    utterance_index: index,
    // The language this utterance was sent with (a later session.update does not change it).
    language,
    audio_duration_ms: audioMs,
    speech_duration_ms: speechMs,
  }),

  /**
   * A transcribed utterance's `completed`: word times moved by `at` seconds (where the utterance
   * starts in the session's audio); `language` is the utterance's own when the engine names none.
   */
  completed: (
    base: CompletedBase,
    r: { text: string; language: string; words: TranscriptWord[] },
    o: { at: number; latencyMs: number; language: string },
  ): Completed => {
    const t = (x: number) => Math.max(0, Math.round((o.at + x) * 1000) / 1000);
    return {
      ...base,
      text: r.text,
      language: r.language || (o.language === 'auto' ? '' : o.language),
      latency_ms: o.latencyMs,
      words: r.words.map((w) => ({
        word: w.word,
        start: t(w.start),
        end: t(w.end),
        confidence: w.confidence,
      })),
    };
  },

  /** The `error` that precedes a failed utterance's `completed`. */
  transcriptionFailed: (index: number, message: string, upstreamCode: string): ErrorEvent => ({
    type: 'error',
    code: 'transcription_failed',
    message,
    utterance_index: index,
    upstream_code: upstreamCode,
  }),

  failedCompleted: (base: CompletedBase, latencyMs: number, message: string): FailedCompleted => ({
    ...base,
    text: '',
    latency_ms: latencyMs,
    error: { code: 'transcription_failed', message },
  }),

  throttled: (o: {
    reason: Throttled['reason'];
    droppedBytes: number;
    droppedMs: number;
    inFlightUtterances: number;
    inFlightBytes: number;
    maxConcurrentUtterances: number;
  }): Throttled => ({
    type: 'service.throttled',
    reason: o.reason,
    dropped_bytes: o.droppedBytes,
    dropped_ms: o.droppedMs,
    in_flight_utterances: o.inFlightUtterances,
    in_flight_bytes: o.inFlightBytes,
    max_concurrent_utterances: o.maxConcurrentUtterances,
  }),

  error: (code: string, message: string, extra: { field?: string } = {}): ErrorEvent => ({
    type: 'error',
    code,
    message,
    ...extra,
  }),
};
