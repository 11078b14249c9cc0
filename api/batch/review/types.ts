/** What the review stages produce (interface 2.5: review_chunk_{i}.json, reviewed_result.json). */
import type { BatchResult } from '../types.js';

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
