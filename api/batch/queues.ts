/**
 * The pg-boss queues of the batch plane: one job per workflow run
 * (`batch-workflow`, stately: one queued-or-active job per workflow) and one
 * per webhook delivery attempt (`batch-webhook`).
 */
import type PgBoss from 'pg-boss';

export const WORKFLOW_QUEUE = 'batch-workflow';
export const WEBHOOK_QUEUE = 'batch-webhook';

/** How long a workflow deferred for its tenant's running bound waits before it is tried again. */
export const DEFER_SECONDS = 2;
/** Ranks past this share one priority (pg-boss priorities are 32-bit integers). */
export const MAX_BACKLOG_RANK = 1_000_000;

/** pg-boss's schema (in `start`) and this plane's queues; idempotent. */
export async function createQueues(boss: PgBoss): Promise<void> {
  await boss.start();
  // One queued-or-active job per workflow (stately + singletonKey): re-queuing is idempotent.
  await boss.createQueue(WORKFLOW_QUEUE, {
    name: WORKFLOW_QUEUE,
    policy: 'stately',
    retryLimit: 3,
    retryDelay: 5,
    expireInSeconds: 4 * 3600,
  });
  await boss.createQueue(WEBHOOK_QUEUE, {
    name: WEBHOOK_QUEUE,
    policy: 'standard',
    retryLimit: 2,
    retryDelay: 30,
    expireInSeconds: 600,
  });
}
