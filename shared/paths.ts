/** URL paths of the public interface that more than one tier serves or names (interface.md). */

/** `WS /v1/audio/transcriptions/stream`: served by the realtime tier, proxied or answered 426 by the API. */
export const STREAM_PATH = '/v1/audio/transcriptions/stream';
