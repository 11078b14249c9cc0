/**
 * Response formats of `POST /v1/audio/transcriptions`, shared by the segment
 * endpoint and the engine worker so both answer byte-for-byte alike, and the
 * parser that reads an OpenAI-compatible worker's verbose_json back.
 */
import type { Transcript, TranscriptSegment, TranscriptWord } from './types.js';
import { normalizeLanguage } from './language.js';

export const RESPONSE_FORMATS = ['verbose_json', 'json', 'text', 'srt', 'vtt'] as const;
export type ResponseFormat = (typeof RESPONSE_FORMATS)[number];

export function isResponseFormat(v: unknown): v is ResponseFormat {
  return typeof v === 'string' && (RESPONSE_FORMATS as readonly string[]).includes(v);
}

export interface Rendered {
  contentType: string;
  body: string | Record<string, unknown>;
}

/** OpenAI's verbose_json, plus a `confidence` per segment and per word. */
export function toVerboseJson(t: Transcript): Record<string, unknown> {
  return {
    task: 'transcribe',
    language: t.language,
    duration: t.duration,
    text: t.text,
    segments: t.segments.map((s) => ({
      id: s.id,
      seek: 0,
      start: s.start,
      end: s.end,
      text: s.text,
      tokens: [],
      temperature: 0,
      avg_logprob: s.confidence > 0 ? Math.round(Math.log(s.confidence) * 1000) / 1000 : -10,
      compression_ratio: 1,
      no_speech_prob: 0,
      confidence: s.confidence,
    })),
    words: t.words.map((w) => ({ word: w.word, start: w.start, end: w.end, confidence: w.confidence })),
  };
}

function timestamp(seconds: number, separator: ',' | '.'): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}

export function toSrt(t: Transcript): string {
  return t.segments
    .map((s, i) => `${i + 1}\n${timestamp(s.start, ',')} --> ${timestamp(s.end, ',')}\n${s.text}\n`)
    .join('\n');
}

export function toVtt(t: Transcript): string {
  const cues = t.segments.map((s) => `${timestamp(s.start, '.')} --> ${timestamp(s.end, '.')}\n${s.text}\n`);
  return ['WEBVTT\n', ...cues].join('\n');
}

export function renderTranscript(t: Transcript, format: ResponseFormat): Rendered {
  switch (format) {
    case 'json':
      return { contentType: 'application/json', body: { text: t.text } };
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: `${t.text}\n` };
    case 'srt':
      return { contentType: 'application/x-subrip; charset=utf-8', body: toSrt(t) };
    case 'vtt':
      return { contentType: 'text/vtt; charset=utf-8', body: toVtt(t) };
    default:
      return { contentType: 'application/json', body: toVerboseJson(t) };
  }
}

const num = (v: unknown, fallback = 0) => (typeof v === 'number' && Number.isFinite(v) ? v : fallback);

/**
 * Reads an OpenAI-compatible verbose_json answer (ours, a Whisper server's,
 * a hosted API's). Missing confidences are derived from `avg_logprob`;
 * language names (`english`) become codes.
 */
export function fromVerboseJson(body: unknown, fallbackLanguage = 'en'): Transcript {
  if (!body || typeof body !== 'object' || typeof (body as { text?: unknown }).text !== 'string') {
    throw new Error('worker answered without a text field');
  }
  const b = body as Record<string, unknown>;
  const segs = Array.isArray(b.segments) ? (b.segments as Record<string, unknown>[]) : [];
  const segments: TranscriptSegment[] = segs.map((s, i) => ({
    id: num(s.id, i),
    start: num(s.start),
    end: num(s.end),
    text: text(s.text),
    confidence: typeof s.confidence === 'number' ? s.confidence : Math.exp(num(s.avg_logprob, 0)),
  }));
  const words: TranscriptWord[] = (Array.isArray(b.words) ? (b.words as Record<string, unknown>[]) : []).map(
    (w) => ({
      word: text(w.word),
      start: num(w.start),
      end: num(w.end),
      confidence:
        typeof w.confidence === 'number'
          ? w.confidence
          : typeof w.probability === 'number'
            ? w.probability
            : 1,
    }),
  );
  return {
    text: String(b.text).trim(),
    language: normalizeLanguage(typeof b.language === 'string' ? b.language : undefined) ?? fallbackLanguage,
    duration: num(b.duration),
    segments,
    words,
  };
}

/** A worker's text field, trimmed ('' when absent or not text). */
function text(v: unknown): string {
  return typeof v === 'string' ? v.trim() : typeof v === 'number' ? String(v) : '';
}
