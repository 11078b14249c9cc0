/**
 * Batch metrics of this process: workflows submitted and finished, steps by
 * kind (chunk indexes folded away: `transcribe_chunk`, `review_chunk`),
 * runs in progress, webhook delivery attempts.
 */
import { counter, gauge, histogram } from '../../shared/metrics/index.js';

export const submitted = counter(
  'stt_batch_workflows_submitted_total',
  'Batch workflows created by a submission.',
);
export const finished = counter(
  'stt_batch_workflows_finished_total',
  'Batch workflows finished, by status.',
  ['status'],
);
export const deferred = counter(
  'stt_batch_runs_deferred_total',
  'Workflow runs put back in the queue because their tenant was at its running bound.',
);
export const runsActive = gauge('stt_batch_runs_active', 'Workflow runs in progress in this process.');
export const stepSeconds = histogram(
  'stt_batch_step_duration_seconds',
  'Duration of each step attempt, by step kind and result.',
  [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900],
  ['step', 'status'],
);
export const webhookAttempts = counter(
  'stt_batch_webhook_attempts_total',
  'Webhook delivery attempts by outcome (delivered, failed, gone, abandoned, skipped).',
  ['outcome'],
);

/** `transcribe_chunk_12` -> `transcribe_chunk`: a bounded label. */
export const stepKind = (name: string): string => name.replace(/_\d+$/, '');
