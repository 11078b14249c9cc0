/**
 * `stream: true` on POST /v1/audio/transcriptions: OpenAI's transcription
 * stream events as server-sent events. The engines answer a clip whole, so
 * the deltas are the transcript's segments, in order (their concatenation is
 * the full text), followed by `transcript.text.done` with the full text.
 */
import type { Context } from 'koa';
import type { Transcript } from '../../../shared/stt/types.js';
import { ApiError } from '../../http/errors.js';

/** The multipart `stream` field: absent or `false` is a plain answer, `true` a stream. */
export function wantsStream(value: string | undefined): boolean {
  if (value === undefined || value === '' || value === 'false') return false;
  if (value === 'true') return true;
  throw new ApiError(400, 'invalid_request', 'Field "stream" must be true or false.');
}

/** The deltas of a transcript: one per segment, spaced so that they join to `text`. */
export function textDeltas(t: Pick<Transcript, 'text' | 'segments'>): string[] {
  const parts = t.segments.map((s) => s.text.trim()).filter(Boolean);
  if (parts.join(' ') !== t.text.trim()) return t.text.trim() ? [t.text.trim()] : [];
  return parts.map((p, i) => (i === 0 ? p : ` ${p}`));
}

export function sendTranscriptStream(ctx: Context, t: Pick<Transcript, 'text' | 'segments'>): void {
  const events = [
    ...textDeltas(t).map((delta) => ({ type: 'transcript.text.delta', delta })),
    { type: 'transcript.text.done', text: t.text.trim() },
  ];
  ctx.set('Cache-Control', 'no-store');
  ctx.type = 'text/event-stream; charset=utf-8';
  ctx.body = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');
}
