/**
 * The optional remote reviewer: either stage may be replaced by any
 * OpenAI-compatible chat-completions endpoint (REVIEW_API_URL, REVIEW_MODEL);
 * if it fails, the offline stage runs instead (steps/review.ts).
 */
import type { ReviewerConfig } from '../../../shared/config/batch.js';
import { round3 as round } from '../../../shared/numbers.js';
import type { BatchResult, ChunkCheckpoint } from '../types.js';
import type { ChangeEntry, ChunkReview } from './types.js';

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
