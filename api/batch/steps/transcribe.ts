/**
 * Steps `transcribe_chunk_{i}`: `concurrency` chunks at a time, each
 * checkpointed to `chunk_{i}.json` as soon as it exists; chunks with a
 * checkpoint that still holds are reused, not transcribed again.
 */
import { setMaxListeners } from 'node:events';
import type { BatchConfig } from '../../../shared/config/batch.js';
import { readRange } from '../../../shared/audio/index.js';
import { utterancePieces } from '../pieces.js';
import { runStep } from '../run/attempts.js';
import type { RunContext } from '../run/context.js';
import { Semaphore } from '../../../shared/semaphore.js';
import { sliceByteRange, type Slice } from '../../../shared/audio/slicing.js';
import type { ChunkCheckpoint } from '../types.js';
import { chunkStep } from './order.js';
import type { ProbeOutput } from './probe.js';

/** A chunk as the workflow's `output.chunks` lists it. */
export interface ChunkSummary {
  index: number;
  start: number;
  end: number;
  key: string;
  reused: boolean;
  text_chars: number;
  engine_ms: number;
}

export interface TranscribeOutput {
  summaries: ChunkSummary[];
  /** Audio sent to the engine by this run (reused chunks are not). */
  transcribedSeconds: number;
  /** Chunks (and engine calls) of this job in flight at most. */
  concurrency: number;
}

/**
 * Transcribes the slices that have no checkpoint in `checkpoints`, which
 * receives each new one once it is stored.
 */
export async function transcribeChunks(
  ctx: RunContext,
  slices: Slice[],
  checkpoints: Map<number, ChunkCheckpoint>,
  probed: ProbeOutput,
  pcmFile: string | undefined,
): Promise<TranscribeOutput> {
  const { d, row, params: p, store, keys } = ctx;
  const concurrency = Math.max(1, Math.min(Math.floor(p.concurrency) || 1, d.config.maxConcurrency));
  // Engine calls of this job in flight: `concurrency`, shared by the utterances of every chunk in flight.
  const jobSlots = new Semaphore(concurrency);
  const summaries = new Array<ChunkSummary>(slices.length);
  const queue = [...slices];
  let transcribedSeconds = 0;
  const worker = async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const slice = s;
      const step = chunkStep(slice.index);
      const key = keys.chunk(slice.index);
      const have = checkpoints.get(slice.index);
      if (have) {
        await d.repo.stepReused(row.id, step);
        summaries[slice.index] = summarise(have, key, true);
        continue;
      }
      const cp = await runStep(
        ctx,
        step,
        () => transcribeChunk(ctx, slice, probed, pcmFile!, jobSlots),
        d.config.chunkAttempts,
      );
      await store.putJson(key, cp);
      checkpoints.set(slice.index, cp);
      transcribedSeconds += slice.end - slice.start;
      summaries[slice.index] = summarise(cp, key, false);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, slices.length) }, worker));
  return { summaries, transcribedSeconds, concurrency };
}

/**
 * One chunk: its utterances go to the engine in parallel, within the job's
 * slots (`concurrency`) and the process's engine slots, so that a job's
 * last chunk keeps every slot busy instead of one, and a decoder that is
 * slowed down simply takes fewer utterances. Decoding is per utterance, so
 * the transcript does not depend on which decoder took which.
 */
async function transcribeChunk(
  ctx: RunContext,
  slice: Slice,
  probe: ProbeOutput,
  pcmFile: string,
  jobSlots: Semaphore,
): Promise<ChunkCheckpoint> {
  const { d, signal } = ctx;
  const { start, end } = sliceByteRange(slice);
  // The chunk's audio is held in memory while its pieces are transcribed: within the process's budget.
  return d.chunkMemory.run(end - start, signal, async () => {
    const pcm = await readRange(pcmFile, start, end);
    return transcribePieces(ctx, slice, probe, pcm, jobSlots);
  });
}

/** The pieces of one chunk, in the engine. */
async function transcribePieces(
  ctx: RunContext,
  slice: Slice,
  probe: ProbeOutput,
  pcm: Buffer,
  jobSlots: Semaphore,
): Promise<ChunkCheckpoint> {
  const { d, row, params: p, signal } = ctx;
  const { config } = d;
  const pieces = await utterancePieces(pcm, config);
  d.hooks?.onEngineCall?.(row.id, slice.index);
  const segments: ChunkCheckpoint['segments'] = [];
  const words: ChunkCheckpoint['words'] = [];
  const texts: string[] = [];
  let language = p.language ?? '';
  let engineMs = 0;
  let workerId = '';
  // The first failure stops the chunk's other utterances (the step retries the chunk).
  const failed = new AbortController();
  const pieceSignal = AbortSignal.any([signal, failed.signal]);
  // Every utterance waiting for a slot or in the engine listens to it (each removes its listener when done).
  setMaxListeners(0, pieceSignal);
  const results = await Promise.all(
    pieces.map((piece) => {
      const bytes = sliceByteRange(piece);
      return jobSlots
        .run(pieceSignal, () =>
          d.engineSlots.run(row.owner_id, pieceSignal, () => {
            d.hooks?.onEngineSlot?.(row.id);
            return d.speech.transcribe({
              pcm: pcm.subarray(bytes.start, Math.min(bytes.end, pcm.length)),
              language: p.language,
              prompt: p.prompt,
              vocabulary: p.vocabulary,
              model: p.model,
              signal: pieceSignal,
              attemptTimeoutMs: engineAttemptTimeoutMs(config, piece.end - piece.start),
            });
          }),
        )
        .catch((err: unknown) => {
          failed.abort(err);
          throw err;
        });
    }),
  );
  pieces.forEach((piece, i) => {
    const r = results[i];
    engineMs += r.engineMs;
    workerId = r.workerId;
    language ||= r.language;
    if (r.text.trim()) texts.push(r.text.trim());
    for (const s of r.segments)
      segments.push({
        start: piece.start + s.start,
        end: piece.start + s.end,
        text: s.text,
        confidence: s.confidence,
      });
    for (const w of r.words)
      words.push({
        word: w.word,
        start: piece.start + w.start,
        end: piece.start + w.end,
        confidence: w.confidence,
      });
  });
  return {
    index: slice.index,
    start: slice.start,
    end: slice.end,
    audio_sha256: probe.audio_sha256,
    segment_seconds: p.segment_seconds,
    text: texts.join(' '),
    language: language || 'en',
    model: p.model ?? d.defaultModel,
    segments,
    words,
    engine_ms: engineMs,
    worker_id: workerId,
    created_at: new Date().toISOString(),
    workflow_id: row.id,
  };
}

function summarise(cp: ChunkCheckpoint, key: string, reused: boolean): ChunkSummary {
  return {
    index: cp.index,
    start: cp.start,
    end: cp.end,
    key,
    reused,
    text_chars: cp.text.length,
    engine_ms: cp.engine_ms,
  };
}

/** A remote pool's per-attempt timeout for a piece of batch audio: it scales with the audio. */
export function engineAttemptTimeoutMs(
  config: Pick<BatchConfig, 'engineTimeoutBaseMs' | 'engineTimeoutPerAudioSecondMs'>,
  seconds: number,
): number {
  return Math.round(config.engineTimeoutBaseMs + config.engineTimeoutPerAudioSecondMs * seconds);
}
