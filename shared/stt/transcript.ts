/**
 * Turns recognized words (with times and confidences) into the transcript
 * shape every plane returns: text, sentence-like segments and words.
 */
import { round3 } from '../numbers.js';
import type { Transcript, TranscriptSegment, TranscriptWord } from './types.js';

/** A pause this long between two words starts a new segment. */
const SEGMENT_PAUSE_SECONDS = 0.5;
/** Segments are cut before they grow longer than this (subtitle-sized). */
const SEGMENT_MAX_SECONDS = 10;

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
      confidence: round3(confidence),
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
    start: round3(w.start),
    end: round3(w.end),
    confidence: round3(w.confidence),
  }));
  return {
    text: rounded.map((w) => w.word).join(' '),
    language,
    duration: round3(durationSeconds),
    segments: groupSegments(rounded),
    words: rounded,
  };
}
