/**
 * The pg-boss queues of the batch plane: one job per workflow run
 * (`batch-workflow`, stately: at most one queued and one active job per
 * workflow, heart-beaten while it runs), the workflows pg-boss gave up on
 * (`batch-workflow-dead`, its dead-letter queue) and one job per webhook
 * delivery attempt (`batch-webhook`); and opening the process's pg-boss
 * client on them.
 */
import { PgBoss, type Queue, type QueuePolicy, type UpdateQueueOptions } from 'pg-boss';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../../shared/config/index.js';
import { withMigrationLock } from '../../shared/db/index.js';
import type { WorkflowRepo } from './repo.js';
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

export interface OpenBossDeps {
  config: Config;
  db: Knex;
  repo: WorkflowRepo;
  log: Logger;
  /** Queues a run of a workflow in this pg-boss (the runtime's fair `enqueue`). */
  enqueue(workflowId: string, boss: PgBoss): Promise<void>;
}

/**
 * The process's pg-boss client: its schema and queues created (under the
 * migrations' lock), then the unfinished workflows of a new schema queued in
 * it (`handOff`).
 */
export async function openBoss(d: OpenBossDeps): Promise<PgBoss> {
  const cfg = d.config;
  if (!cfg.databaseUrl) throw new Error('batch: DATABASE_URL is required');
  const boss = new PgBoss({
    connectionString: cfg.databaseUrl,
    schema: cfg.batch.pgBossSchema,
    max: 4,
    schedule: false,
    // Every process supervises: a dead process's jobs are failed (and retried) by a live one within
    // about a third of a heartbeat of going stale.
    supervise: true,
    superviseIntervalSeconds: cfg.batch.superviseSeconds,
    monitorIntervalSeconds: cfg.batch.superviseSeconds,
  });
  boss.on('error', (err) => d.log.error({ err }, 'pg-boss error'));
  boss.on('warning', (warning) => d.log.warn({ warning }, 'pg-boss warning'));
  // pg-boss creates its schema and queues in start/createQueue; instances starting together on an
  // empty database deadlock there, so they take turns under the migrations' advisory lock.
  try {
    await withMigrationLock(d.db, async () => {
      await createQueues(boss, cfg.batch);
      await handOff(boss, d);
    });
  } catch (err) {
    await boss.stop({ graceful: false }).catch(() => {});
    throw err;
  }
  return boss;
}

/**
 * The first process to use a pg-boss schema queues in it every unfinished
 * workflow (the previous pg-boss major's schema, `pgboss`, is not carried
 * over: its jobs are left where they are). Each workflow is given back
 * first, so its next run is not counted as a crash. Recorded in
 * `batch_pgboss_handoffs` once done; a process that died part way is
 * followed by one that queues the rest (a workflow that has a job here
 * already is left alone).
 */
async function handOff(boss: PgBoss, d: OpenBossDeps): Promise<void> {
  const schema = d.config.batch.pgBossSchema;
  if (await d.repo.handedOff(schema)) return;
  let count = 0;
  for (let after = ''; ;) {
    const ids = await d.repo.unfinishedIds(after);
    if (!ids.length) break;
    for (const id of ids) {
      const jobs = await boss.findJobs(WORKFLOW_QUEUE, { key: id });
      if (jobs.some((j) => j.state === 'created' || j.state === 'retry' || j.state === 'active')) continue;
      await d.repo.giveBack(id);
      await d.enqueue(id, boss);
      count++;
    }
    after = ids[ids.length - 1];
  }
  await d.repo.recordHandOff(schema, count);
  if (count) d.log.info({ count, schema }, 'unfinished workflows queued in a new pg-boss schema');
}
