/**
 * The lifecycle of a batch workflow run: take the workflow's lease (only one
 * live run per workflow), keep it while the steps run (pipeline.ts), then
 * finish the workflow complete or errored and hand the webhook (optional) to
 * its queue.
 *
 * Resumability: chunks are checkpointed as they are transcribed
 * (run/checkpoints.ts) and step outputs merged into the workflow row as they
 * complete. When a process dies its lease lapses, the sweeper re-queues the
 * workflow and the next run resumes from the checkpoints. A shutdown gives
 * the lease back at once; an outage of our own stores pauses the run.
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { OutboundError } from './net/index.js';
import { isDependencyUnavailable } from '../../shared/process/index.js';
import { tenantStore } from './storage/index.js';
import { SpeechError } from '../../shared/stt/types.js';
import { artifactKeys } from './artifacts.js';
import { LeaseLostError, PermanentError, ShutdownError, withoutPaths } from './errors.js';
import * as metrics from './metrics.js';
import { runSteps } from './pipeline.js';
import type { WorkflowRow } from './repo.js';
import { RemoteReviewer } from './review/llm.js';
import { removeDeadWorkDirs } from './run/cleanup.js';
import type { RunContext, RunnerDeps } from './run/context.js';
import { keepLease } from './run/lease.js';
import { STEPS } from './steps/order.js';

/** The runner's dependencies and hooks (defined beside the steps that use them). */
export type { RunnerDeps, RunnerHooks } from './run/context.js';

export class WorkflowRunner {
  readonly runnerId = `${process.pid}-${randomBytes(4).toString('hex')}`;
  private readonly reviewer: RemoteReviewer;
  private readonly active = new Map<string, { abort: AbortController; done: Promise<void> }>();
  private stopping = false;

  constructor(private readonly d: RunnerDeps) {
    this.reviewer = new RemoteReviewer(d.config.review);
  }

  /**
   * Shutdown: runs in progress stop at their next await, give their lease
   * back (so another process resumes them at once from the checkpoints) and
   * this resolves when they have, or after `timeoutMs`.
   */
  async shutdown(timeoutMs = 10_000): Promise<void> {
    this.stopping = true;
    const runs = [...this.active.values()];
    for (const r of runs) r.abort.abort(new ShutdownError('worker shutting down'));
    await Promise.race([
      Promise.all(runs.map((r) => r.done)),
      new Promise((r) => setTimeout(r, timeoutMs).unref()),
    ]);
  }

  /** Stops this process's run of a workflow that was terminated (its row already says so). */
  stopRun(workflowId: string): void {
    this.active.get(workflowId)?.abort.abort(new LeaseLostError('workflow terminated'));
  }

  /** Runs (or resumes) a workflow if nobody else holds it. */
  async run(workflowId: string, jobId: string | null = null): Promise<void> {
    if (this.stopping) return;
    // Already running here (a re-queued job and the released one can both arrive):
    // the lease is this runner's own, so acquiring again would run it twice.
    if (this.active.has(workflowId)) return;
    const abort = new AbortController();
    let finished!: () => void;
    this.active.set(workflowId, { abort, done: new Promise<void>((r) => (finished = r)) });
    metrics.runsActive.inc();
    try {
      await this.runHeld(workflowId, jobId, abort);
    } finally {
      this.active.delete(workflowId);
      metrics.runsActive.dec();
      finished();
    }
  }

  private async runHeld(workflowId: string, jobId: string | null, abort: AbortController): Promise<void> {
    const { repo, config } = this.d;
    const row = await repo.acquire(
      workflowId,
      this.runnerId,
      config.leaseSeconds,
      jobId,
      config.maxRunningPerTenant,
    );
    if (!row) return; // finished, or another live process has it
    if (row === 'deferred') {
      // Its tenant already runs its share: the slot goes to the next job (another tenant's), this
      // one is queued again to try shortly.
      this.d.logger.debug({ workflowId }, 'tenant at its running-workflow bound; queued again');
      metrics.deferred.inc();
      return this.d.deferRun(workflowId);
    }
    const log = this.d.logger.child({ workflowId, requestId: row.request_id, run: row.runs });
    if (row.lapses >= config.quarantineAfterCrashes) return this.quarantine(row, log);
    const lease = keepLease({
      repo,
      workflowId,
      runnerId: this.runnerId,
      leaseSeconds: config.leaseSeconds,
      abort,
      log,
    });
    const workDir = path.join(config.tmpDir, `${workflowId}-${this.runnerId}`);
    const ctx: RunContext = {
      d: this.d,
      row,
      params: row.params,
      store: tenantStore(this.d.store, row.owner_id),
      keys: artifactKeys(row.params.request_id),
      reservation: reservationOf(this.d, row),
      workDir,
      signal: abort.signal,
      log,
    };
    try {
      await removeDeadWorkDirs(config.tmpDir, workflowId, workDir, log);
      log.info('workflow run started');
      await runSteps(ctx, this.reviewer);
      // The webhook step waits before the workflow ends: if the hand-off below is lost, the sweeper finds it.
      if (row.params.webhook_url) await repo.stepSet(workflowId, STEPS.webhook, 'waiting');
      if (await repo.finish(workflowId, this.runnerId, 'complete')) {
        // Billed by runSteps, which ended the reservation: wait for that end.
        await ctx.reservation.release();
        metrics.finished.inc({ status: 'complete' });
        log.info('workflow complete');
        await this.handOffWebhook(row, log);
      }
    } catch (err) {
      if (lease.lost || err instanceof LeaseLostError) {
        log.warn('lease lost (another run continues this workflow, or it was terminated); this run stops');
        return;
      }
      if (abort.signal.reason instanceof ShutdownError) {
        await repo.release(workflowId, this.runnerId).catch(() => {});
        log.info('workflow paused by shutdown; it resumes from its checkpoints on the next worker');
        return;
      }
      if (isStoreOutage(err)) return this.pausedByOutage(workflowId, err, log);
      const e = err as Error;
      const error = { name: e.name || 'Error', message: withoutPaths(e.message || String(err)) };
      // The caller's input (URL, audio) is at fault: its message, never a stack with server paths.
      if (err instanceof PermanentError || err instanceof OutboundError)
        log.warn({ error }, 'workflow errored');
      else log.error({ err }, 'workflow errored');
      try {
        if (row.params.webhook_url) await repo.stepSet(workflowId, STEPS.webhook, 'waiting');
        if (await repo.finish(workflowId, this.runnerId, 'errored', error)) {
          await ctx.reservation.release();
          metrics.finished.inc({ status: 'errored' });
          await this.handOffWebhook(row, log);
        }
      } catch (finishErr) {
        // The failure could not be recorded (the database went away): the run is retried later.
        if (isDependencyUnavailable(finishErr)) return this.pausedByOutage(workflowId, finishErr, log);
        throw finishErr;
      }
    } finally {
      lease.stop();
      await fsp.rm(workDir, { recursive: true, force: true }).catch(() => {});
    }
  }

  /**
   * The workflow's runs have stopped `lapses` worker processes (each died or
   * hung holding it): it is errored, not run again, so it cannot take down
   * the next process too. Its reservation is released and its webhook told.
   */
  private async quarantine(row: WorkflowRow, log: Logger): Promise<void> {
    const error = {
      name: 'workflow_quarantined',
      message: `This job stopped ${row.lapses} worker processes and was set aside so that it cannot stop another. Submit it again with a new request_id; if it fails the same way, report its workflow_id to the operator.`,
    };
    log.error({ lapses: row.lapses }, 'workflow quarantined: its runs stopped worker processes');
    if (row.params.webhook_url) await this.d.repo.stepSet(row.id, STEPS.webhook, 'waiting');
    if (await this.d.repo.finish(row.id, this.runnerId, 'errored', error)) {
      await reservationOf(this.d, row).release();
      metrics.finished.inc({ status: 'quarantined' });
      await this.handOffWebhook(row, log);
    }
  }

  /** A dependency outage stopped the run: give the lease back if possible and let the runtime requeue it. */
  private async pausedByOutage(workflowId: string, err: unknown, log: Logger): Promise<void> {
    log.warn({ err }, 'workflow paused: a dependency is unavailable; it resumes from its checkpoints');
    await this.d.repo.release(workflowId, this.runnerId).catch(() => {});
    this.d.onOutage?.(workflowId);
  }

  /** Queues the first delivery; a failure here is not the workflow's: the sweeper queues it later (WEBHOOK_RECOVER_AFTER_SECONDS in shared/config/batch.ts). */
  private async handOffWebhook(row: WorkflowRow, log: Logger): Promise<void> {
    if (!row.params.webhook_url) return;
    try {
      await this.d.enqueueWebhook(row.id);
    } catch (err) {
      log.warn({ err }, 'webhook delivery could not be queued; the sweeper queues it again');
    }
  }
}

/** The workflow's reservation in its key's window (made by this run's probe, or an earlier run's). */
function reservationOf(d: RunnerDeps, row: WorkflowRow) {
  return d.budget.reservation({ plane: 'batch', refId: row.id, keyId: row.key_id });
}

/**
 * Our own stores (Postgres, artifact storage) could not be reached: the run
 * pauses and resumes later. The caller's audio URL or the speech engine being
 * unreachable is the job's own failure, retried by its step and then reported.
 */
function isStoreOutage(err: unknown): boolean {
  if (err instanceof OutboundError || err instanceof SpeechError || err instanceof PermanentError)
    return false;
  return isDependencyUnavailable(err);
}
