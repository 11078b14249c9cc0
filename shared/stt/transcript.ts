/**
 * Turns recognized words (with times and confidences) into the transcript
 * shape every plane returns: text, sentence-like segments and words.
 */
import type { Transcript, TranscriptSegment, TranscriptWord } from './types.js';

/** A pause this long between two words starts a new segment. */
const SEGMENT_PAUSE_SECONDS = 0.5;
/** Segments are cut before they grow longer than this (subtitle-sized). */
const SEGMENT_MAX_SECONDS = 10;

const round = (x: number) => Math.round(x * 1000) / 1000;

export function groupSegments(words: TranscriptWord[]): TranscriptSegment[] {
  const segments: TranscriptSegment[] = [];
  let current: TranscriptWord[] = [];
  const flush = () => {
    if (current.length === 0) return;
    const confidence = current.reduce((s, w) => s + w.confidence, 0) / current.length;
    segments.push({
      id: segments.length,
      start: current[0].start,
      end: current[current.length - 1].end,
      text: current.map((w) => w.word).join(' '),
      confidence: round(confidence),
    });
    current = [];
  };
  for (const w of words) {
    const prev = current[current.length - 1];
    if (
      prev &&
      (w.start - prev.end >= SEGMENT_PAUSE_SECONDS || w.end - current[0].start > SEGMENT_MAX_SECONDS)
    )
      flush();
    current.push(w);
  }
  flush();
  return segments;
}

export function buildTranscript(
  words: TranscriptWord[],
  durationSeconds: number,
  language: string,
): Transcript {
  const rounded = words.map((w) => ({
    ...w,
    start: round(w.start),
    end: round(w.end),
    confidence: round(w.confidence),
  }));
  return {
    text: rounded.map((w) => w.word).join(' '),
    language,
    duration: round(durationSeconds),
    segments: groupSegments(rounded),
    words: rounded,
  };
}
