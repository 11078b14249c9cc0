/** Shapes of the batch plane (interface 2.1–2.5). */
import type { FromSchema } from 'json-schema-to-ts';
import type { jobRequestSchema } from './schemas.js';

/**
 * A job request as the validator leaves it (interface 2.2): derived from
 * its JSON Schema, so defaulted fields (filled in by ajv's `useDefaults`)
 * are present.
 */
export type JobRequest = FromSchema<typeof jobRequestSchema>;

/** Parameters a workflow runs with (request plus resolved defaults). */
export interface WorkflowParams {
  audio_url: string;
  request_id: string;
  language?: string;
  model?: string;
  prompt?: string;
  /** The key's vocabulary when the job was submitted (issue 37). */
  vocabulary?: import('../../shared/stt/bias/compile.js').VocabularyEntry[];
  segment_seconds: number;
  response_format: string;
  concurrency: number;
  webhook_url?: string;
  review: boolean;
  metadata?: Record<string, unknown>;
  /** Plan cap on audio length at submission time. */
  max_audio_seconds: number;
  /** Plan's rolling audio budget (maxAudioSecondsPerWindow) at submission time. */
  max_window_seconds?: number;
}

export type WorkflowStatus =
  | 'queued'
  | 'running'
  | 'complete'
  | 'errored'
  | 'terminated'
  | 'paused'
  | 'waiting'
  | 'waitingForPause'
  | 'unknown';

export const WORKFLOW_STATUSES: WorkflowStatus[] = [
  'queued',
  'running',
  'complete',
  'errored',
  'terminated',
  'paused',
  'waiting',
  'waitingForPause',
  'unknown',
];

export type StepStatus = 'queued' | 'running' | 'complete' | 'errored' | 'skipped' | 'waiting';

/** chunk_{i}.json */
export interface ChunkCheckpoint {
  index: number;
  /** Seconds into the whole recording. */
  start: number;
  end: number;
  /** sha256 of the decoded PCM of the whole recording: checkpoints of other audio are never reused. */
  audio_sha256: string;
  segment_seconds: number;
  text: string;
  language: string;
  model: string;
  /** Times relative to the chunk start. */
  segments: { start: number; end: number; text: string; confidence: number }[];
  words: { word: string; start: number; end: number; confidence: number }[];
  engine_ms: number;
  worker_id: string;
  created_at: string;
  /** The workflow that produced it. */
  workflow_id?: string;
}

export interface ResultSegment {
  id: number;
  start_time: number;
  end_time: number;
  duration: number;
  text: string;
  confidence: number;
}

/** result.json / output.result */
export interface BatchResult {
  text: string;
  segments: ResultSegment[];
  summary: {
    total_duration: number;
    total_speech_duration: number;
    overall_speech_ratio: number;
    num_segments: number;
  };
  metadata: { language: string; model: string; chunk_count: number; audio_duration_seconds: number };
}
