/**
 * The offline reviewer, the default of both stages.
 *
 * Stage one (annotate) looks at each chunk on its own and lists likely
 * errors: words the engine was unsure of (low confidence) and near-misses of
 * terms from `metadata` (terms.ts), so "dash wood" is caught for "Dashwood".
 *
 * Stage two (correct) decides once per wrong form for the whole transcript
 * and applies that decision everywhere, so the same misheard name is fixed
 * the same way in every chunk, and writes a change log (before, after,
 * where, why).
 */
import { round3 as round } from '../../../shared/numbers.js';
import type { BatchResult, ChunkCheckpoint, ResultSegment } from '../types.js';
import { REVIEW_MAX_TERMS } from '../../../shared/config/batch.js';
import { nearMiss, prepareTerms, type TimedWord } from './terms.js';
import { norm } from './text.js';
import type { ChangeEntry, ChunkReview, ReviewIssue } from './types.js';

// ---------- stage one: annotate ----------

export interface AnnotateOptions {
  /** Most terms taken from the metadata (REVIEW_MAX_TERMS in shared/config/batch.ts). */
  maxTerms?: number;
}

export function annotateChunkOffline(
  chunk: ChunkCheckpoint,
  metadata: Record<string, unknown> | undefined,
  lowConfidence: number,
  opts: AnnotateOptions = {},
): ChunkReview {
  const steps = annotateSteps(chunk, metadata, lowConfidence, opts);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * The same as annotateChunkOffline, but it gives the event loop back every
 * `sliceMs` of work, so a long chunk with many terms never holds the API.
 */
export async function annotateChunkOfflineAsync(
  chunk: ChunkCheckpoint,
  metadata: Record<string, unknown> | undefined,
  lowConfidence: number,
  opts: AnnotateOptions & { sliceMs?: number } = {},
): Promise<ChunkReview> {
  const sliceMs = opts.sliceMs ?? 10;
  const steps = annotateSteps(chunk, metadata, lowConfidence, opts);
  let sliceStart = performance.now();
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (performance.now() - sliceStart >= sliceMs) {
      await new Promise((resolve) => setImmediate(resolve));
      sliceStart = performance.now();
    }
  }
}

/** Stage one, one n-gram per step (a generator, so callers choose when to yield). */
function* annotateSteps(
  chunk: ChunkCheckpoint,
  metadata: Record<string, unknown> | undefined,
  lowConfidence: number,
  opts: AnnotateOptions,
): Generator<void, ChunkReview> {
  const index = prepareTerms(metadata, opts.maxTerms ?? REVIEW_MAX_TERMS);
  const words: TimedWord[] = chunk.words.map((w) => ({
    ...w,
    start: chunk.start + w.start,
    end: chunk.start + w.end,
  }));
  const issues: ReviewIssue[] = [];
  const claimed = new Set<number>();
  // Terms already transcribed right are left alone (and never part of a near-miss n-gram).
  const normWords = words.map((w) => norm(w.word));
  for (const n of index.sizes) {
    for (let i = 0; i + n <= words.length; i++) {
      if (index.phrases.has(normWords.slice(i, i + n).join(' ')))
        for (let k = 0; k < n; k++) claimed.add(i + k);
    }
  }
  const correct = new Set(claimed);
  // Longest n-grams first so "dash wood" wins over "wood" alone.
  for (let n = 3; n >= 1; n--) {
    for (let i = 0; i + n <= words.length; i++) {
      if ([...Array(n).keys()].some((k) => claimed.has(i + k))) continue;
      const gram = words.slice(i, i + n);
      const hit = index.terms.length ? nearMiss(gram, index) : null;
      yield;
      if (!hit) continue;
      for (let k = 0; k < n; k++) claimed.add(i + k);
      const text = gram.map((w) => w.word).join(' ');
      issues.push({
        type: 'term_near_miss',
        text,
        start_time: round(gram[0].start),
        end_time: round(gram[n - 1].end),
        confidence: round(Math.min(...gram.map((w) => w.confidence))),
        suggestion: hit.term.surface,
        distance: hit.distance,
        phonetic_match: hit.phonetic,
        why: `sounds like the known term "${hit.term.surface}" (edit distance ${hit.distance}${hit.phonetic ? ', same phonetic key' : ''})`,
      });
    }
  }
  words.forEach((w, i) => {
    if ((claimed.has(i) && !correct.has(i)) || w.confidence >= lowConfidence) return;
    issues.push({
      type: 'low_confidence',
      text: w.word,
      start_time: round(w.start),
      end_time: round(w.end),
      confidence: round(w.confidence),
      why: `engine confidence ${round(w.confidence)} is below ${lowConfidence}`,
    });
  });
  issues.sort((a, b) => a.start_time - b.start_time);
  return {
    chunk_index: chunk.index,
    start_time: chunk.start,
    end_time: chunk.end,
    reviewer: 'offline',
    issues,
  };
}

// ---------- stage two: correct ----------

/** The key of a wrong form: lower case, single spaces. */
function formOf(text: string): string {
  return text.toLowerCase().trim().split(/\s+/).filter(Boolean).join(' ');
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Stage one flags every near-miss; stage two only acts on strong ones: the
 * same letters (spacing aside), or, for terms of six letters or more, the
 * same sound or one edit away. Shorter terms sit too close to ordinary words
 * ("park" is not corrected to the term "Pork"; "dash wood" is to "Dashwood").
 * Remote reviewer suggestions are taken as given.
 */
function strongEnough(issue: ReviewIssue): boolean {
  if (issue.type === 'reviewer') return true;
  if (issue.type !== 'term_near_miss') return false;
  const d = issue.distance ?? Infinity;
  if (d === 0) return true;
  // Short terms are too close to ordinary words ("park"/"Pork") to correct on sound or one edit.
  return norm(issue.suggestion ?? '').length >= 6 && (issue.phonetic_match === true || d <= 1);
}

export function correctOffline(
  result: BatchResult,
  reviews: ChunkReview[],
): { result: BatchResult; changes: ChangeEntry[] } {
  // One decision per wrong form for the whole transcript: the closest suggestion wins.
  const decisions = new Map<string, { after: string; why: string; distance: number }>();
  for (const r of reviews) {
    for (const issue of r.issues) {
      if (!issue.suggestion || !strongEnough(issue)) continue;
      const form = formOf(issue.text);
      if (!form) continue;
      const prev = decisions.get(form);
      const distance = issue.distance ?? 0;
      if (!prev || distance < prev.distance)
        decisions.set(form, { after: issue.suggestion, why: issue.why, distance });
    }
  }
  const changes: ChangeEntry[] = [];
  // One pattern for every form, longest first, built once: each segment is scanned once.
  const forms = [...decisions.keys()].sort((a, b) => b.length - a.length);
  const pattern = forms.length
    ? new RegExp(
        `(?<![\\w'])(?:${forms.map((f) => f.split(' ').map(escapeRe).join('\\s+')).join('|')})(?![\\w'])`,
        'gi',
      )
    : undefined;
  const segments: ResultSegment[] = result.segments.map((seg) => {
    if (!pattern) return seg;
    const text = seg.text.replace(pattern, (before) => {
      const d = decisions.get(formOf(before));
      if (!d || before === d.after) return before;
      changes.push({
        before,
        after: d.after,
        where: { segment_id: seg.id, start_time: seg.start_time, end_time: seg.end_time },
        why: d.why,
      });
      return d.after;
    });
    return { ...seg, text };
  });
  return { result: { ...result, segments, text: segments.map((s) => s.text).join(' ') }, changes };
}
