/**
 * Terms the caller told us about in `metadata` (known terms, speaker names
 * and roles, specialty vocabulary), indexed so that every word n-gram of a
 * transcript is checked against them in near-linear time: by phrase, and by
 * joined length with a bounded edit distance and a phonetic key.
 */
import { boundedLevenshtein, norm, phoneticKey } from './text.js';

/** Longest term (characters); longer strings in `metadata` are not terms. */
export const REVIEW_MAX_TERM_LENGTH = 60;
/** Levels of `metadata` the reviewer looks into. */
const TERM_DEPTH = 4;

/** Every string found in the metadata (values of any key, arrays, nested objects), at most `limit`. */
export function termsFromMetadata(metadata: Record<string, unknown> | undefined, limit = Infinity): string[] {
  const out = new Set<string>();
  // Iterative walk: no recursion, whatever the nesting.
  const stack: [unknown, number][] = [[metadata, 0]];
  while (stack.length && out.size < limit) {
    const [v, depth] = stack.pop()!;
    if (depth > TERM_DEPTH || v == null) continue;
    if (typeof v === 'string') {
      for (const part of v.split(/[,;\n]/)) {
        const t = part.trim();
        if (t && t.length <= REVIEW_MAX_TERM_LENGTH) out.add(t);
        if (out.size >= limit) break;
      }
    } else if (typeof v === 'object') {
      const items = Array.isArray(v) ? v : Object.values(v);
      // Reversed onto the stack, so terms come out in document order.
      for (let i = items.length - 1; i >= 0; i--) stack.push([items[i], depth + 1]);
    }
  }
  return [...out];
}

export interface Term {
  surface: string;
  joined: string;
  key: string;
  words: string[];
  /** Position in the metadata: ties between equally close terms go to the first. */
  order: number;
}

/** The terms, indexed for near-linear matching: by phrase and by joined length. */
export interface TermIndex {
  terms: Term[];
  /** `words.join(' ')` of every term: an n-gram equal to one is already right. */
  phrases: Set<string>;
  /** Word counts that occur among the terms. */
  sizes: number[];
  byLength: Map<number, Term[]>;
  maxLength: number;
}

const indexCache = new WeakMap<object, Map<number, TermIndex>>();

/** The terms of `metadata` (at most `limit`), indexed; cached per metadata object and limit. */
export function prepareTerms(metadata: Record<string, unknown> | undefined, limit: number): TermIndex {
  const cached = metadata && indexCache.get(metadata)?.get(limit);
  if (cached) return cached;
  const terms = termsFromMetadata(metadata, limit)
    .map((surface, order) => {
      const words = surface.split(/\s+/).map(norm).filter(Boolean);
      const joined = words.join('');
      return { surface, joined, key: phoneticKey(joined), words, order };
    })
    .filter((t) => t.joined.length >= 4 && t.words.length <= 3);
  const byLength = new Map<number, Term[]>();
  for (const t of terms) {
    const list = byLength.get(t.joined.length);
    if (list) list.push(t);
    else byLength.set(t.joined.length, [t]);
  }
  const index: TermIndex = {
    terms,
    phrases: new Set(terms.map((t) => t.words.join(' '))),
    sizes: [...new Set(terms.map((t) => t.words.length))],
    byLength,
    maxLength: Math.max(0, ...byLength.keys()),
  };
  if (metadata) {
    const perLimit = indexCache.get(metadata) ?? new Map<number, TermIndex>();
    perLimit.set(limit, index);
    indexCache.set(metadata, perLimit);
  }
  return index;
}

/** A word of a transcript on the recording's time line. */
export interface TimedWord {
  word: string;
  start: number;
  end: number;
  confidence: number;
}

/**
 * Near-miss check of one n-gram against the terms; null when nothing is
 * close. Only terms of a comparable length are looked at, and the edit
 * distance stops as soon as it exceeds what could still be accepted.
 */
export function nearMiss(
  gram: TimedWord[],
  index: TermIndex,
): { term: Term; distance: number; phonetic: boolean } | null {
  const words = gram.map((w) => norm(w.word));
  if (words.some((w) => !w)) return null;
  if (index.phrases.has(words.join(' '))) return null; // already right
  const joined = words.join('');
  const key = phoneticKey(joined);
  let best: { term: Term; distance: number; phonetic: boolean } | null = null;
  for (let len = 1; len <= index.maxLength; len++) {
    if (Math.abs(joined.length - len) > Math.max(2, len * 0.34)) continue;
    for (const term of index.byLength.get(len) ?? []) {
      const phonetic = key === term.key;
      const closeBound = Math.max(1, Math.floor(len * 0.25));
      let bound = phonetic ? Math.max(closeBound, Math.ceil(len * 0.5)) : closeBound;
      if (best) bound = Math.min(bound, best.distance);
      const distance = boundedLevenshtein(joined, term.joined, bound);
      if (distance > bound) continue;
      if (best && (distance > best.distance || (distance === best.distance && term.order > best.term.order)))
        continue;
      best = { term, distance, phonetic };
    }
  }
  return best;
}
