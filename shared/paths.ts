/** URL paths of the public interface that more than one tier serves or names (interface.md). */

/** `WS /v1/audio/transcriptions/stream`: served by the realtime tier, proxied or answered 426 by the API. */
export const STREAM_PATH = '/v1/audio/transcriptions/stream';

/** `WS /v1/realtime`: OpenAI's Realtime protocol for transcription sessions (issue 25), on the realtime tier. */
export const OPENAI_REALTIME_PATH = '/v1/realtime';
