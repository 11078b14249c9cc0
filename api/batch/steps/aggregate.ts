/** Step `aggregate`: the chunk transcripts as one transcript on the recording's time line (`result.json`). */
import { round3 } from '../../../shared/numbers.js';
import type { RunContext } from '../run/context.js';
import type { BatchResult, ChunkCheckpoint, ResultSegment, WorkflowParams } from '../types.js';

/** Writes `result.json` and returns the result. */
export async function aggregateStep(
  ctx: RunContext,
  chunks: ChunkCheckpoint[],
  durationSeconds: number,
): Promise<BatchResult> {
  const result = aggregate(chunks, ctx.params, durationSeconds, ctx.d.defaultModel);
  await ctx.store.putJson(ctx.keys.result, result);
  return result;
}

/** The step's entry in the workflow's `output.aggregate`. */
export function aggregateOutput(ctx: RunContext, result: BatchResult) {
  return {
    key: ctx.keys.result,
    num_segments: result.segments.length,
    text_chars: result.text.length,
  };
}

/** Chunk transcripts → one transcript on the recording's time line. */
export function aggregate(
  chunks: ChunkCheckpoint[],
  p: Pick<WorkflowParams, 'language' | 'model'>,
  duration: number,
  defaultModel: string,
): BatchResult {
  const segments: ResultSegment[] = [];
  for (const c of chunks) {
    const segs = c.segments.length
      ? c.segments
      : c.text.trim()
        ? [
            {
              start: 0,
              end: c.end - c.start,
              text: c.text,
              confidence: avg(c.words.map((w) => w.confidence)),
            },
          ]
        : [];
    for (const s of segs) {
      const text = s.text.trim();
      if (!text) continue;
      const start = round3(c.start + s.start);
      const end = round3(Math.min(c.end, c.start + s.end));
      segments.push({
        id: segments.length,
        start_time: start,
        end_time: end,
        duration: round3(end - start),
        text,
        confidence: round3(s.confidence),
      });
    }
  }
  const speech = segments.reduce((a, s) => a + s.duration, 0);
  const language = p.language ?? chunks.find((c) => c.language)?.language ?? 'en';
  return {
    text: segments.map((s) => s.text).join(' '),
    segments,
    summary: {
      total_duration: round3(duration),
      total_speech_duration: round3(speech),
      overall_speech_ratio: duration > 0 ? round3(speech / duration) : 0,
      num_segments: segments.length,
    },
    metadata: {
      language,
      model: p.model ?? defaultModel,
      chunk_count: chunks.length,
      audio_duration_seconds: round3(duration),
    },
  };
}

function avg(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
}
