/**
 * The poll response (interface 2.3, 2.4), presented from the workflow row
 * and its steps as the repository reads them (`WorkflowRepo.pollViews`).
 *
 * Field order is the interface's: `workflow_id`, `status`, `steps`, `output`
 * (only when complete), `error` (set only when errored), then the project's
 * own `request_id`. In `output.result`, `segments`, `summary` and `metadata`
 * come first and their items' listed keys first, in the listed order; any
 * other keys follow in the order they were stored.
 */
import type { WorkflowStatus } from './types.js';
import { isObject } from '../../shared/validation.js';

export interface PollStep {
  name: string;
  status: string;
  started_at: string | null;
  ended_at: string | null;
  attempts: number;
}

/** What presenting a poll reads: the workflow's own columns and its steps in order (times as Postgres writes them). */
export interface PollView {
  id: string;
  request_id: string;
  status: WorkflowStatus;
  error: { name: string; message: string } | null;
  /** Read only when complete. */
  output: Record<string, unknown> | null;
  steps: PollStep[];
}

/** A workflow as a poll reads it: its kept body or, when it has none (`body` null), the view to present and its `rev`. */
export type PollRow = PollView & { body: string | null; rev: number };

export interface PollResponse {
  workflow_id: string;
  status: WorkflowStatus;
  steps: PollStep[];
  output?: Record<string, unknown>;
  error: { name: string; message: string } | null;
  request_id: string;
}

/** The step outputs shown in a completed workflow's `output`, in this order. */
const STEP_OUTPUTS = ['probe', 'slice', 'chunks', 'aggregate', 'review', 'report', 'result'] as const;
const RESULT_KEYS = ['segments', 'summary', 'metadata'];
const SEGMENT_KEYS = ['id', 'start_time', 'end_time', 'duration', 'text', 'confidence'];
const SUMMARY_KEYS = ['total_duration', 'total_speech_duration', 'overall_speech_ratio', 'num_segments'];
const METADATA_KEYS = ['language', 'model', 'chunk_count', 'audio_duration_seconds'];

/** `obj` with the listed keys first, in that order (those it has), then its other keys as they were. */
function ordered(obj: unknown, keys: readonly string[]): unknown {
  if (!isObject(obj)) return obj;
  const listed = keys.filter((k) => Object.hasOwn(obj, k));
  const rest = Object.keys(obj).filter((k) => !keys.includes(k));
  // fromEntries defines own properties: a stored key named `__proto__` stays a plain key.
  return Object.fromEntries([...listed, ...rest].map((k) => [k, obj[k]]));
}

function presentResult(result: unknown): unknown {
  const r = ordered(result, RESULT_KEYS);
  if (!isObject(r)) return r;
  if (Array.isArray(r.segments)) r.segments = r.segments.map((s) => ordered(s, SEGMENT_KEYS));
  if ('summary' in r) r.summary = ordered(r.summary, SUMMARY_KEYS);
  if ('metadata' in r) r.metadata = ordered(r.metadata, METADATA_KEYS);
  return r;
}

/** A stored time as the API writes times: ISO 8601 in UTC with milliseconds. */
const isoTime = (t: string | null): string | null => (t === null ? null : new Date(t).toISOString());

export function presentPoll(v: PollView): PollResponse {
  const steps = v.steps.map((s) => ({
    name: s.name,
    status: s.status,
    started_at: isoTime(s.started_at),
    ended_at: isoTime(s.ended_at),
    attempts: s.attempts,
  }));
  let output: Record<string, unknown> | undefined;
  if (v.status === 'complete') {
    output = {};
    for (const k of STEP_OUTPUTS)
      output[k] = (k === 'result' ? presentResult(v.output?.[k]) : v.output?.[k]) ?? null;
  }
  return {
    workflow_id: v.id,
    status: v.status,
    steps,
    ...(output && { output }),
    // A terminated workflow says why too (cancelled, or its key revoked).
    error: v.status === 'errored' || v.status === 'terminated' ? v.error : null,
    request_id: v.request_id,
  };
}

/** Most polls one query reads. */
const MAX_BATCH = 256;

interface PendingPoll {
  workflowId: string;
  ownerId: string;
  resolve(body: string | undefined): void;
  reject(err: unknown): void;
}

/** What the reader needs of the repository (api/batch/repo.ts). */
export interface PollStore {
  pollRows(ids: string[], owners: string[]): Promise<(PollRow | undefined)[]>;
  keepPollBodies(bodies: { id: string; rev: number; body: string }[]): Promise<void>;
}

/**
 * Polls are the most frequent request of the batch plane: those that arrive
 * in the same turn of the event loop are read together by one query, so
 * under load a poll costs a share of one round trip; a single poll waits
 * only for the end of the current turn. A workflow's body is presented once
 * per change and kept on its row (`PollStore.keepPollBodies`); polls of an
 * unchanged workflow send the kept text as it is.
 */
export class PollReader {
  private pending: PendingPoll[] = [];

  constructor(private readonly store: PollStore) {}

  /** The poll response (JSON text) of the tenant's workflow, or undefined (unknown id, or another tenant's). */
  poll(workflowId: string, ownerId: string): Promise<string | undefined> {
    return new Promise((resolve, reject) => {
      if (this.pending.push({ workflowId, ownerId, resolve, reject }) === 1) setImmediate(this.flush);
    });
  }

  private readonly flush = () => {
    const all = this.pending;
    this.pending = [];
    for (let i = 0; i < all.length; i += MAX_BATCH) void this.readBatch(all.slice(i, i + MAX_BATCH));
  };

  private async readBatch(batch: PendingPoll[]): Promise<void> {
    let rows: (PollRow | undefined)[];
    try {
      rows = await this.store.pollRows(
        batch.map((p) => p.workflowId),
        batch.map((p) => p.ownerId),
      );
    } catch (err) {
      for (const p of batch) p.reject(err);
      return;
    }
    const presented = new Map<string, { id: string; rev: number; body: string }>();
    batch.forEach((p, i) => {
      const row = rows[i];
      if (!row || row.body !== null) {
        p.resolve(row?.body ?? undefined);
        return;
      }
      let kept = presented.get(row.id);
      if (!kept) {
        kept = { id: row.id, rev: row.rev, body: JSON.stringify(presentPoll(row)) };
        presented.set(row.id, kept);
      }
      p.resolve(kept.body);
    });
    // Keeping the body only saves later polls work: when it fails, the next poll presents the row again.
    if (presented.size) this.store.keepPollBodies([...presented.values()]).catch(() => {});
  }
}
