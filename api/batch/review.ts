/**
 * Two-stage review of a batch transcript, offline by default.
 *
 * Stage one (annotate) looks at each chunk on its own and lists likely
 * errors: words the engine was unsure of (low confidence) and near-misses of
 * terms the caller told us about in `metadata` (known terms, speaker names
 * and roles, specialty vocabulary), found by edit distance and a phonetic
 * key over word n-grams, so "dash wood" is caught for "Dashwood".
 *
 * Stage two (correct) decides once per wrong form for the whole transcript
 * and applies that decision everywhere, so the same misheard name is fixed
 * the same way in every chunk, and writes a change log (before, after,
 * where, why).
 *
 * Either stage may be replaced by any OpenAI-compatible chat-completions
 * endpoint (REVIEW_API_URL, REVIEW_MODEL); if it fails the offline stage runs.
 */
import type { ReviewerConfig } from '../../shared/config/batch.js';
import type { BatchResult, ChunkCheckpoint, ResultSegment } from './types.js';
import { REVIEW_MAX_TERMS } from '../../shared/config/batch.js';

export interface ReviewIssue {
  type: 'low_confidence' | 'term_near_miss' | 'reviewer';
  /** The words as transcribed. */
  text: string;
  start_time: number;
  end_time: number;
  confidence?: number;
  suggestion?: string;
  why: string;
  /** Edit distance and phonetic agreement for near-misses. */
  distance?: number;
  phonetic_match?: boolean;
}

export interface ChunkReview {
  chunk_index: number;
  start_time: number;
  end_time: number;
  reviewer: string;
  issues: ReviewIssue[];
}

export interface ChangeEntry {
  before: string;
  after: string;
  where: { segment_id: number; start_time: number; end_time: number };
  why: string;
}

export interface ReviewedResult extends BatchResult {
  changes: ChangeEntry[];
  reviewer: { annotate: string; correct: string };
}

// ---------- text helpers ----------

export function levenshtein(a: string, b: string): number {
  return boundedLevenshtein(a, b, Infinity);
}

/**
 * Edit distance, or `bound + 1` as soon as it is known to exceed `bound`
 * (each row's minimum never decreases), so a far pair costs a few rows.
 */
export function boundedLevenshtein(a: string, b: string, bound: number): number {
  if (a === b) return 0;
  if (Math.abs(a.length - b.length) > bound) return bound + 1;
  if (!a.length) return b.length;
  if (!b.length) return a.length;
  let prev = new Uint32Array(b.length + 1);
  let cur = new Uint32Array(b.length + 1);
  for (let j = 0; j <= b.length; j++) prev[j] = j;
  for (let i = 1; i <= a.length; i++) {
    cur[0] = i;
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      cur[j] = v;
      if (v < rowMin) rowMin = v;
    }
    if (rowMin > bound) return bound + 1;
    [prev, cur] = [cur, prev];
  }
  return prev[b.length];
}

/** A small English phonetic key (Metaphone-like): similar-sounding spellings agree. */
export function phoneticKey(word: string): string {
  let w = word.toLowerCase().replace(/[^a-z]/g, '');
  if (!w) return '';
  w = w
    .replace(/^kn|^gn|^pn|^wr/, (m) => m[1])
    .replace(/^x/, 's')
    .replace(/ph/g, 'f')
    .replace(/ck/g, 'k')
    .replace(/sch/g, 'sk')
    .replace(/tch/g, 'ch')
    .replace(/c(?=[eiy])/g, 's')
    .replace(/dg(?=[eiy])/g, 'j')
    .replace(/gh(?![aeiou])/g, '')
    .replace(/q/g, 'k')
    .replace(/c/g, 'k')
    .replace(/x/g, 'ks')
    .replace(/z/g, 's')
    .replace(/v/g, 'f')
    .replace(/th/g, '0')
    .replace(/wh/g, 'w')
    .replace(/d/g, 't')
    .replace(/b/g, 'p')
    .replace(/g/g, 'k');
  const first = w[0];
  const rest = w.slice(1).replace(/[aeiouyhw]/g, '');
  let key = /[aeiouy]/.test(first) ? 'A' : first;
  for (const ch of rest) if (key[key.length - 1] !== ch) key += ch;
  return key;
}

function norm(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9']/g, '');
}

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
      const items = Array.isArray(v) ? v : Object.values(v as object);
      // Reversed onto the stack, so terms come out in document order.
      for (let i = items.length - 1; i >= 0; i--) stack.push([items[i], depth + 1]);
    }
  }
  return [...out];
}

interface Term {
  surface: string;
  joined: string;
  key: string;
  words: string[];
  /** Position in the metadata: ties between equally close terms go to the first. */
  order: number;
}

/** The terms, indexed for near-linear matching: by phrase and by joined length. */
interface TermIndex {
  terms: Term[];
  /** `words.join(' ')` of every term: an n-gram equal to one is already right. */
  phrases: Set<string>;
  /** Word counts that occur among the terms. */
  sizes: number[];
  byLength: Map<number, Term[]>;
  maxLength: number;
}

const indexCache = new WeakMap<object, Map<number, TermIndex>>();

function prepareTerms(metadata: Record<string, unknown> | undefined, limit: number): TermIndex {
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

interface Word {
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
function nearMiss(
  gram: Word[],
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
  const words: Word[] = chunk.words.map((w) => ({
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

// ---------- optional remote reviewer ----------

export class RemoteReviewer {
  constructor(private readonly cfg: ReviewerConfig) {}

  enabledFor(stage: 'annotate' | 'correct'): boolean {
    return Boolean(this.cfg.url) && this.cfg.stages.includes(stage);
  }

  get name(): string {
    return `llm:${this.cfg.model}`;
  }

  private async chat(system: string, user: unknown): Promise<Record<string, unknown>> {
    const url = `${this.cfg.url!.replace(/\/+$/, '')}/chat/completions`;
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(this.cfg.apiKey ? { authorization: `Bearer ${this.cfg.apiKey}` } : {}),
      },
      body: JSON.stringify({
        model: this.cfg.model,
        temperature: 0,
        response_format: { type: 'json_object' },
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: JSON.stringify(user) },
        ],
      }),
      signal: AbortSignal.timeout(this.cfg.timeoutMs),
    });
    if (!res.ok) throw new Error(`reviewer answered ${res.status}`);
    const body = (await res.json()) as { choices?: { message?: { content?: string } }[] };
    const content = body.choices?.[0]?.message?.content ?? '';
    const json = content.slice(content.indexOf('{'), content.lastIndexOf('}') + 1);
    return JSON.parse(json) as Record<string, unknown>;
  }

  async annotate(
    chunk: ChunkCheckpoint,
    metadata: Record<string, unknown> | undefined,
  ): Promise<ChunkReview> {
    const out = await this.chat(
      'You review one chunk of an automatic speech transcript. List likely recognition errors. ' +
        'Answer with JSON {"issues":[{"text": words as transcribed, "suggestion": corrected words or null, "why": short reason}]}.',
      {
        metadata: metadata ?? {},
        text: chunk.text,
        words: chunk.words.map((w) => [w.word, round(w.confidence)]),
      },
    );
    const issues = Array.isArray(out.issues) ? (out.issues as Record<string, unknown>[]) : [];
    return {
      chunk_index: chunk.index,
      start_time: chunk.start,
      end_time: chunk.end,
      reviewer: this.name,
      issues: issues
        .filter((i) => typeof i.text === 'string')
        .map((i) => ({
          type: 'reviewer' as const,
          text: String(i.text),
          start_time: chunk.start,
          end_time: chunk.end,
          ...(typeof i.suggestion === 'string' ? { suggestion: i.suggestion } : {}),
          why: typeof i.why === 'string' ? i.why : 'flagged by reviewer',
        })),
    };
  }

  async correct(
    result: BatchResult,
    reviews: ChunkReview[],
    metadata: Record<string, unknown> | undefined,
  ): Promise<{ result: BatchResult; changes: ChangeEntry[] }> {
    const out = await this.chat(
      'You correct an automatic speech transcript as a whole, consistently (the same error is fixed the same way everywhere). ' +
        'Only fix recognition errors; keep segment ids. Answer with JSON {"segments":[{"id":number,"text":string}],' +
        '"changes":[{"segment_id":number,"before":string,"after":string,"why":string}]}.',
      {
        metadata: metadata ?? {},
        annotations: reviews.flatMap((r) => r.issues),
        segments: result.segments.map((s) => ({ id: s.id, text: s.text })),
      },
    );
    const byId = new Map<number, string>();
    for (const s of Array.isArray(out.segments) ? (out.segments as { id?: unknown; text?: unknown }[]) : []) {
      if (typeof s.id === 'number' && typeof s.text === 'string') byId.set(s.id, s.text);
    }
    const segments = result.segments.map((s) => ({ ...s, text: byId.get(s.id) ?? s.text }));
    const segById = new Map(segments.map((s) => [s.id, s]));
    const changes: ChangeEntry[] = [];
    for (const c of Array.isArray(out.changes) ? (out.changes as Record<string, unknown>[]) : []) {
      const seg = segById.get(Number(c.segment_id));
      if (!seg || typeof c.before !== 'string' || typeof c.after !== 'string') continue;
      changes.push({
        before: c.before,
        after: c.after,
        where: { segment_id: seg.id, start_time: seg.start_time, end_time: seg.end_time },
        why: typeof c.why === 'string' ? c.why : 'reviewer correction',
      });
    }
    // Segments the model changed without logging still get an entry.
    for (const s of segments) {
      const orig = result.segments.find((o) => o.id === s.id)!;
      if (orig.text !== s.text && !changes.some((c) => c.where.segment_id === s.id)) {
        changes.push({
          before: orig.text,
          after: s.text,
          where: { segment_id: s.id, start_time: s.start_time, end_time: s.end_time },
          why: 'reviewer correction',
        });
      }
    }
    return { result: { ...result, segments, text: segments.map((s) => s.text).join(' ') }, changes };
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
