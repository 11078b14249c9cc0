/**
 * The pg-boss queues of the batch plane: one job per workflow run
 * (`batch-workflow`, stately: at most one queued and one active job per
 * workflow, heart-beaten while it runs), the workflows pg-boss gave up on
 * (`batch-workflow-dead`, its dead-letter queue) and one job per webhook
 * delivery attempt (`batch-webhook`).
 */
import type { PgBoss, Queue, QueuePolicy, UpdateQueueOptions } from 'pg-boss';
import type { BatchConfig } from '../../shared/config/batch.js';

export const WORKFLOW_QUEUE = 'batch-workflow';
export const WORKFLOW_DEAD_QUEUE = 'batch-workflow-dead';
export const WEBHOOK_QUEUE = 'batch-webhook';

/** How long a workflow deferred for its tenant's running bound waits before it is tried again. */
export const DEFER_SECONDS = 2;
/** Ranks past this share one priority (pg-boss priorities are 32-bit integers). */
export const MAX_BACKLOG_RANK = 1_000_000;

/** What a queue is set to besides its policy. */
type QueueSettings = Omit<Queue, 'name' | 'policy' | 'partition'> & UpdateQueueOptions;

/**
 * The workflow queue's options. A job's attempts are spent only by runs
 * that failed: their process died or hung (the heartbeat stopped), their
 * handler threw, or they outlived `expireInSeconds`. A shutdown and a
 * deferral queue a new job instead, and an outage pauses the run in place,
 * so none of them spends one. Two crashes quarantine the workflow on the
 * third attempt (BatchConfig.quarantineAfterCrashes); the fourth is spare.
 */
export function workflowQueue(config: Pick<BatchConfig, 'heartbeatSeconds'>): QueueSettings {
  return {
    heartbeatSeconds: config.heartbeatSeconds,
    retryLimit: 3,
    retryDelay: 1,
    // A backstop only: a live run heart-beats, a dead one is failed within about one heartbeat.
    expireInSeconds: 4 * 3600,
    deadLetter: WORKFLOW_DEAD_QUEUE,
  };
}

/**
 * pg-boss's schema (in `start`) and this plane's queues, created if missing
 * and set to this configuration (the heartbeat follows BATCH_HEARTBEAT_SECONDS).
 */
export async function createQueues(
  boss: PgBoss,
  config: Pick<BatchConfig, 'heartbeatSeconds'>,
): Promise<void> {
  await boss.start();
  const queues: [string, QueuePolicy, QueueSettings][] = [
    // Before the workflow queue, which names it.
    [WORKFLOW_DEAD_QUEUE, 'standard', { retryLimit: 5, retryDelay: 30, expireInSeconds: 600 }],
    // One queued-or-active job per workflow (stately + singletonKey): queuing it again is idempotent.
    [WORKFLOW_QUEUE, 'stately', workflowQueue(config)],
    [WEBHOOK_QUEUE, 'standard', { retryLimit: 2, retryDelay: 30, expireInSeconds: 600 }],
  ];
  for (const [name, policy, settings] of queues) {
    if (!(await boss.getQueue(name))) await boss.createQueue(name, { policy, ...settings });
    // A queue's policy is fixed when it is made (pg-boss refuses to change it); the rest follows the configuration.
    else await boss.updateQueue(name, settings);
  }
}
