/**
 * The lifecycle of a batch workflow run: take the workflow (only one live
 * run per workflow: the one pg-boss handed its job to), run the steps
 * (pipeline.ts), then finish the workflow complete or errored and hand the
 * webhook (optional) to its queue.
 *
 * Resumability: chunks are checkpointed as they are transcribed
 * (run/checkpoints.ts) and step outputs merged into the workflow row as they
 * complete. When a process dies its jobs stop heart-beating, pg-boss fails
 * and retries them, and the next run resumes from the checkpoints. A run
 * whose job pg-boss took away is aborted. A shutdown gives the workflow back
 * and queues it again at once; an outage of our own stores pauses the run,
 * which resumes in place once they answer.
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
import { PermanentError, RunLostError, ShutdownError, withoutPaths } from './errors.js';
import * as metrics from './metrics.js';
import { runSteps } from './pipeline.js';
import type { WorkflowRow } from './repo.js';
import { RemoteReviewer } from './review/llm.js';
import { removeDeadWorkDirs } from './run/cleanup.js';
import type { RunContext, RunJob, RunnerDeps } from './run/context.js';
import { DEFER_SECONDS } from './queues.js';
import { STEPS } from './steps/order.js';

/** The runner's dependencies and hooks (defined beside the steps that use them). */
export type { RunJob, RunnerDeps, RunnerHooks } from './run/context.js';

export class WorkflowRunner {
  readonly runnerId = `${process.pid}-${randomBytes(4).toString('hex')}`;
  private readonly reviewer: RemoteReviewer;
  private readonly active = new Map<string, { abort: AbortController; done: Promise<void> }>();
  private stopping = false;
  /** Runs started by this runner; each run's id (`run_owner`) is `{runnerId}-{n}`. */
  private runs = 0;

  constructor(private readonly d: RunnerDeps) {
    this.reviewer = new RemoteReviewer(d.config.review);
  }

  /**
   * Shutdown: runs in progress stop at their next await, give their
   * workflow back and queue it again (so another process resumes it at once
   * from the checkpoints); this resolves when they have, or after `timeoutMs`.
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
    this.active.get(workflowId)?.abort.abort(new RunLostError('workflow terminated'));
  }

  /**
   * Runs (or resumes) a workflow; `job` is the pg-boss job it was handed.
   * Rejects only when the job should be failed (and retried) by pg-boss.
   */
  async run(workflowId: string, job?: RunJob): Promise<void> {
    // A job fetched while stopping: pg-boss fails this attempt and retries it in a live process.
    if (this.stopping) throw new ShutdownError('worker shutting down');
    // An earlier run of it here: pg-boss handed the job out again, so that run lost it (its handler
    // outlived its heartbeat, e.g. a blocked event loop). It stops before this one starts.
    const earlier = this.active.get(workflowId);
    if (earlier) {
      earlier.abort.abort(new RunLostError('its job was handed to a newer run'));
      await earlier.done;
    }
    if (job?.signal.aborted) return;
    const abort = new AbortController();
    const lost = () => abort.abort(new RunLostError('pg-boss took the job away (stale heartbeat)'));
    job?.signal.addEventListener('abort', lost, { once: true });
    let finished!: () => void;
    this.active.set(workflowId, { abort, done: new Promise<void>((r) => (finished = r)) });
    metrics.runsActive.inc();
    const runner = `${this.runnerId}-${++this.runs}`;
    try {
      // An outage pauses the run; it resumes here, as the same run, while pg-boss still has its job here.
      for (let delayMs = 500; ; delayMs = Math.min(10_000, delayMs * 2)) {
        const outcome = await this.runHeld(workflowId, runner, job, abort);
        if (outcome !== 'paused') return;
        if (!(await this.waitToResume(workflowId, runner, job, abort.signal, delayMs))) return;
      }
    } finally {
      job?.signal.removeEventListener('abort', lost);
      if (this.active.get(workflowId)?.abort === abort) this.active.delete(workflowId);
      metrics.runsActive.dec();
      finished();
    }
  }

  /**
   * Waits for our stores after an outage paused the run: true to resume it
   * in place (the database answers, pg-boss still has the job here, the
   * workflow is still this run's), false when the run is over (its job or
   * workflow was taken away, or the process is stopping).
   */
  private async waitToResume(
    workflowId: string,
    runner: string,
    job: RunJob | undefined,
    signal: AbortSignal,
    firstDelayMs: number,
  ): Promise<boolean> {
    // Looked at every second once the first wait is over: the job's heartbeat must reach pg-boss before
    // its supervisor, back too, takes the stale heartbeat for a dead process.
    for (let delayMs = firstDelayMs; ; delayMs = 1000) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, delayMs);
        signal.addEventListener('abort', done, { once: true });
      });
      if (signal.aborted) {
        // Stopping: the workflow goes back to the queue like any run's at shutdown.
        if (signal.reason instanceof ShutdownError) await this.giveBack(workflowId, runner);
        return false;
      }
      try {
        if (job && !(await this.d.jobHeld(job))) return false;
        if (!(await this.d.repo.holds(workflowId, runner))) return false;
        this.d.logger.info({ workflowId }, 'stores answer again: the paused run resumes');
        return true;
      } catch (err) {
        if (!isDependencyUnavailable(err)) throw err;
        this.d.logger.debug({ err, workflowId }, 'database still unavailable; the run resumes later');
      }
    }
  }

  /** Resolves 'paused' when an outage stopped the run (see `run`). */
  private async runHeld(
    workflowId: string,
    runner: string,
    job: RunJob | undefined,
    abort: AbortController,
  ): Promise<'paused' | undefined> {
    const { repo, config } = this.d;
    let row: Awaited<ReturnType<typeof repo.acquire>>;
    try {
      row = await repo.acquire(workflowId, runner, job?.id ?? null, config.maxRunningPerTenant);
    } catch (err) {
      if (!isDependencyUnavailable(err)) throw err;
      this.d.logger.warn({ err, workflowId }, 'workflow paused: the database is unavailable');
      return 'paused';
    }
    if (!row) return; // finished or terminated
    if (row === 'deferred') {
      // Its tenant already runs its share: the slot goes to the next job (another tenant's), this
      // one is queued again to try shortly.
      this.d.logger.debug({ workflowId }, 'tenant at its running-workflow bound; queued again');
      metrics.deferred.inc();
      await this.d.requeue(workflowId, DEFER_SECONDS);
      return;
    }
    const log = this.d.logger.child({ workflowId, requestId: row.request_id, run: row.runs });
    if (row.lapses >= config.quarantineAfterCrashes) {
      await this.quarantine(row, runner, log);
      return;
    }
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
      if (await repo.finish(workflowId, runner, 'complete')) {
        // Billed by runSteps, which ended the reservation: wait for that end.
        await ctx.reservation.release();
        metrics.finished.inc({ status: 'complete' });
        log.info('workflow complete');
        await this.handOffWebhook(row, log);
      }
    } catch (err) {
      const reason: unknown = abort.signal.reason;
      if (reason instanceof RunLostError || err instanceof RunLostError) {
        const why = reason instanceof Error ? reason.message : (err as Error).message;
        log.warn(`this run stops (${why}); another run continues the workflow, or it was terminated`);
        return;
      }
      if (reason instanceof ShutdownError) {
        await this.giveBack(workflowId, runner);
        log.info('workflow paused by shutdown; it resumes from its checkpoints on the next worker');
        return;
      }
      if (isStoreOutage(err)) {
        log.warn({ err }, 'workflow paused: a dependency is unavailable; it resumes from its checkpoints');
        return 'paused';
      }
      const e = err as Error;
      const error = { name: e.name || 'Error', message: withoutPaths(e.message || String(err)) };
      // The caller's input (URL, audio) is at fault: its message, never a stack with server paths.
      if (err instanceof PermanentError || err instanceof OutboundError)
        log.warn({ error }, 'workflow errored');
      else log.error({ err }, 'workflow errored');
      try {
        if (row.params.webhook_url) await repo.stepSet(workflowId, STEPS.webhook, 'waiting');
        if (await repo.finish(workflowId, runner, 'errored', error)) {
          await ctx.reservation.release();
          metrics.finished.inc({ status: 'errored' });
          await this.handOffWebhook(row, log);
        }
      } catch (finishErr) {
        // The failure could not be recorded (the database went away): the run is paused and tried again.
        if (isDependencyUnavailable(finishErr)) {
          log.warn({ err: finishErr }, 'workflow paused: its failure could not be recorded yet');
          return 'paused';
        }
        throw finishErr;
      }
    } finally {
      await fsp.rm(workDir, { recursive: true, force: true }).catch(() => {});
    }
  }

  /**
   * Shutdown: the run gives the workflow back (so its next run is not
   * counted as a crash) and queues it with a new job, which another process
   * takes at once. Rejects when it cannot be queued: pg-boss then fails this
   * attempt and retries the job itself.
   */
  private async giveBack(workflowId: string, runner: string): Promise<void> {
    await this.d.repo.release(workflowId, runner).catch(() => {});
    await this.d.requeue(workflowId, 0);
  }

  /**
   * The workflow's runs have stopped `lapses` worker processes (each died or
   * hung holding it): it is errored, not run again, so it cannot take down
   * the next process too. Its reservation is released and its webhook told.
   */
  private async quarantine(row: WorkflowRow, runner: string, log: Logger): Promise<void> {
    const error = {
      name: 'workflow_quarantined',
      message: `This job stopped ${row.lapses} worker processes and was set aside so that it cannot stop another. Submit it again with a new request_id; if it fails the same way, report its workflow_id to the operator.`,
    };
    log.error({ lapses: row.lapses }, 'workflow quarantined: its runs stopped worker processes');
    if (row.params.webhook_url) await this.d.repo.stepSet(row.id, STEPS.webhook, 'waiting');
    if (await this.d.repo.finish(row.id, runner, 'errored', error)) {
      await reservationOf(this.d, row).release();
      metrics.finished.inc({ status: 'quarantined' });
      await this.handOffWebhook(row, log);
    }
  }

  /**
   * pg-boss gave up on the workflow (its job failed every attempt and went
   * to the dead-letter queue): it is errored rather than left running with
   * no job, its reservation released and its webhook told.
   */
  async abandon(workflowId: string): Promise<void> {
    const row = await this.d.repo.get(workflowId);
    if (!row || (row.status !== 'queued' && row.status !== 'running')) return;
    const error = {
      name: 'workflow_failed',
      message:
        'The job could not be run to its end and was given up. Submit it again; if it fails the same way, report its workflow_id to the operator.',
    };
    const log = this.d.logger.child({ workflowId, requestId: row.request_id });
    if (row.params.webhook_url) await this.d.repo.stepSet(workflowId, STEPS.webhook, 'waiting');
    if (await this.d.repo.abandon(workflowId, error)) {
      log.error(
        { runs: row.runs, lapses: row.lapses },
        'workflow given up: its pg-boss job failed every attempt',
      );
      await reservationOf(this.d, row).release();
      metrics.finished.inc({ status: 'errored' });
      await this.handOffWebhook(row, log);
    }
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
