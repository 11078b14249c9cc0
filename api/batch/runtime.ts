/**
 * The batch plane of one API process: the pg-boss queues (workflow runs and
 * webhook deliveries), the workers that run them, the sweeper that re-queues
 * workflows whose process died, and the submission/poll/artifact operations
 * the routes call.
 *
 * Built by the API's composition root (api/deps.ts) and handed to the routes;
 * the server calls `start` at start-up and `stop` at shutdown. Submissions
 * made before start are picked up by the sweeper once it runs.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import PgBoss from 'pg-boss';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../../shared/config/index.js';
import type { Principal } from '../../shared/auth/index.js';
import { withMigrationLock } from '../../shared/db/index.js';
import { isIpLiteral, OutboundClient } from './net/index.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';
import type { SpeechEngine } from '../../shared/stt/types.js';
import { isDependencyUnavailable } from '../../shared/process/index.js';
import type { UsageBudget } from '../../shared/usage/budget.js';
import * as metrics from './metrics.js';
import { PollReader } from './poll.js';
import { WorkflowRepo } from './repo.js';
import type { JobRequest, WorkflowParams } from './types.js';
import { WebhookDeliverer, type WebhookDeliveryJob } from './webhook.js';
import { loadWebhookSecrets, tenantSecret } from './signing.js';
import { FairShare } from '../../shared/fairShare.js';
import { createQueues, DEFER_SECONDS, MAX_BACKLOG_RANK, WEBHOOK_QUEUE, WORKFLOW_QUEUE } from './queues.js';
import { ByteBudget } from '../../shared/semaphore.js';
import { Retention } from './retention.js';
import { Cancellation } from './cancel.js';
import { type RunnerHooks, WorkflowRunner } from './workflow.js';
import { normalizeLanguage } from '../../shared/stt/language.js';

export { WORKFLOW_QUEUE, WEBHOOK_QUEUE } from './queues.js';

export interface BatchRuntimeDeps {
  config: Config;
  logger: Logger;
  db: Knex;
  /** The process's audio budget: jobs reserve, are billed and release through it. */
  budget: UsageBudget;
  speech: SpeechEngine;
  /** Where artifacts live (the configured store, or a test's). */
  store: ArtifactStore;
  /** Fetches of `audio_url` and webhook deliveries, under the outbound policy. */
  outbound: OutboundClient;
  /** Runner hooks for tests and benchmarks. */
  hooks?: RunnerHooks;
}

export interface JobAccepted {
  request_id: string;
  workflow_id: string;
  status: 'queued';
  endpoint: string;
  poll_endpoint: string;
}

export class BatchRuntime {
  readonly repo: WorkflowRepo;
  private readonly polls: PollReader;
  readonly store: ArtifactStore;
  readonly outbound: OutboundClient;
  private boss: PgBoss | undefined;
  private starting: Promise<void> | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private runner: WorkflowRunner | undefined;
  private deliverer: WebhookDeliverer | undefined;
  /** Workflows paused by an outage, waiting to be queued again (workflow id -> timer). */
  private readonly resuming = new Map<string, NodeJS.Timeout>();
  private readonly log: Logger;

  readonly retention: Retention;
  private readonly cancellation: Cancellation;

  constructor(private readonly d: BatchRuntimeDeps) {
    this.repo = new WorkflowRepo(d.db);
    this.retention = new Retention(
      d.db,
      d.store,
      d.config.batch.retentionSeconds,
      d.logger.child({ component: 'batch' }),
    );
    this.cancellation = new Cancellation(
      d.db,
      d.store,
      d.budget,
      (id) => this.runner?.stopRun(id),
      d.logger.child({ component: 'batch' }),
    );
    this.polls = new PollReader(this.repo);
    this.store = d.store;
    this.outbound = d.outbound;
    this.log = d.logger.child({ component: 'batch' });
  }

  get started(): boolean {
    return this.boss !== undefined;
  }

  // ---------- lifecycle ----------

  async start(opts: { workers?: boolean } = {}): Promise<void> {
    this.starting ??= this.doStart(opts.workers ?? this.d.config.batch.workersEnabled);
    return this.starting;
  }

  private async doStart(workers: boolean): Promise<void> {
    const cfg = this.d.config;
    if (!cfg.databaseUrl) throw new Error('batch: DATABASE_URL is required');
    await this.store.init();
    const boss = new PgBoss({
      connectionString: cfg.databaseUrl,
      schema: cfg.batch.pgBossSchema,
      max: 4,
      schedule: false,
      supervise: true,
    });
    boss.on('error', (err) => this.log.error({ err }, 'pg-boss error'));
    // pg-boss creates its schema and queues in start/createQueue; instances starting together on an
    // empty database deadlock there, so they take turns under the migrations' advisory lock.
    await withMigrationLock(this.d.db, () => createQueues(boss));
    this.boss = boss;
    if (!workers) return;

    const secrets = await this.webhookSecrets();
    this.runner = new WorkflowRunner({
      db: this.d.db,
      budget: this.d.budget,
      repo: this.repo,
      store: this.store,
      speech: this.d.speech,
      outbound: this.outbound,
      config: cfg.batch,
      audio: cfg.speech.audio,
      defaultModel: cfg.speech.segment.defaultModel,
      chunkMemory: new ByteBudget(cfg.batch.chunkMemoryBytes),
      engineSlots: engineShare(
        cfg.batch.engineSlots || (cfg.speech.engine === 'builtin' ? cfg.speech.builtin.threads : 16),
      ),
      logger: this.log,
      hooks: this.d.hooks,
      enqueueWebhook: (id) => this.sendWebhook({ workflowId: id, attempt: 1 }, 0),
      deferRun: (id) => this.enqueue(id, DEFER_SECONDS),
      onOutage: (id) => this.resumeAfterOutage(id),
    });
    this.deliverer = new WebhookDeliverer({
      repo: this.repo,
      store: this.store,
      outbound: this.outbound,
      config: cfg.batch,
      secrets,
      logger: this.log,
      schedule: (job, delay) => this.sendWebhook(job, delay),
    });
    const runner = this.runner;
    const deliverer = this.deliverer;
    for (let i = 0; i < cfg.batch.workflowsPerProcess; i++) {
      await boss.work<{ workflowId: string }>(
        WORKFLOW_QUEUE,
        { batchSize: 1, pollingIntervalSeconds: 0.5 },
        async ([job]) => {
          try {
            await runner.run(job.data.workflowId, job.id);
          } catch (err) {
            // The lease could not even be taken: the database is down. Queue it again when it is back
            // (this job, still active if pg-boss cannot complete it now, is closed then).
            if (!isDependencyUnavailable(err)) throw err;
            this.resumeAfterOutage(job.data.workflowId, 500, job.id);
          }
        },
      );
    }
    // Several deliveries at once, each receiver at most its share of them (WebhookDeliverer.deliver).
    for (let i = 0; i < cfg.batch.webhook.concurrency; i++) {
      await boss.work<WebhookDeliveryJob>(
        WEBHOOK_QUEUE,
        { batchSize: 1, pollingIntervalSeconds: 0.5 },
        async ([job]) => {
          metrics.webhookAttempts.inc({ outcome: await deliverer.deliver(job.data) });
        },
      );
    }
    const sweep = () => {
      this.sweep().catch((err) => this.log.warn({ err }, 'batch sweep failed'));
    };
    sweep();
    this.sweeper = setInterval(sweep, cfg.batch.sweepIntervalMs);
    this.sweeper.unref();
  }

  /**
   * Queues a workflow that an outage paused again as soon as the database
   * answers (backoff 0.5 s doubling to 10 s): its dead queue job is closed
   * and a new one sent, and the run resumes from its checkpoints. The
   * sweeper would find it too, but only once its lease has lapsed.
   */
  private resumeAfterOutage(workflowId: string, delayMs = 500, jobId?: string): void {
    if (!this.boss || this.resuming.has(workflowId)) return;
    const timer = setTimeout(() => {
      this.resuming.delete(workflowId);
      void (async () => {
        try {
          await this.closeDeadJobs([jobId, await this.repo.jobId(workflowId)]);
          await this.enqueue(workflowId);
          this.log.info({ workflowId }, 'workflow paused by an outage queued again');
        } catch (err) {
          this.log.debug({ err, workflowId }, 'database still unavailable; workflow resumes later');
          this.resumeAfterOutage(workflowId, Math.min(10_000, delayMs * 2), jobId);
        }
      })();
    }, delayMs);
    timer.unref();
    this.resuming.set(workflowId, timer);
  }

  async stop(): Promise<void> {
    for (const t of this.resuming.values()) clearTimeout(t);
    this.resuming.clear();
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    const boss = this.boss;
    await this.runner?.shutdown();
    this.boss = undefined;
    this.starting = undefined;
    if (boss)
      await boss
        .stop({ graceful: true, timeout: 5000, wait: true })
        .catch((err) => this.log.warn({ err }, 'pg-boss stop'));
    await this.store.close();
  }

  /** Re-queues workflows whose run died (lapsed lease) or whose queue job was lost. */
  async sweep(): Promise<number> {
    const stale = await this.repo.stale(Math.max(30, this.d.config.batch.leaseSeconds));
    for (const w of stale) {
      await this.closeDeadJobs([w.job_id]);
      await this.enqueue(w.id);
    }
    if (stale.length) this.log.info({ count: stale.length }, 'stale workflows re-queued');
    await this.retention.expire();
    if (this.boss) {
      const lost = await this.repo.lostWebhooks(this.d.config.batch.webhook.recoverAfterSeconds);
      for (const w of lost) await this.sendWebhook({ workflowId: w.id, attempt: w.attempt }, 0);
      if (lost.length) this.log.warn({ count: lost.length }, 'lost webhook deliveries queued again');
    }
    return stale.length;
  }

  /**
   * A dead run's job stays `active` in pg-boss until it expires and, under
   * the stately policy, keeps a new job for the same workflow from starting:
   * complete it (it is dead: the workflow's lease lapsed or was never taken).
   * The workflow row keeps the id of its job (sent by `enqueue`, or running
   * it: `acquire`), so this goes through pg-boss's API by id; completing
   * touches only an `active` job, so a finished or a queued one is left be.
   */
  private async closeDeadJobs(jobIds: readonly (string | null | undefined)[]): Promise<void> {
    const ids = [...new Set(jobIds.filter((id): id is string => Boolean(id)))];
    if (!this.boss || !ids.length) return;
    await this.boss
      .complete(WORKFLOW_QUEUE, ids)
      .catch((err) => this.log.warn({ err }, 'could not close dead job'));
  }

  /**
   * Queues a run of the workflow. Fair between tenants: pg-boss hands out
   * jobs by priority, then age, and a workflow's priority is minus the
   * number of its tenant's unfinished workflows submitted before it, so
   * every tenant's first job comes before any tenant's second, whatever the
   * backlog (issue 41: behind 300 jobs of one tenant, another's started
   * 134 s after submission).
   */
  private async enqueue(workflowId: string, afterSeconds = 0): Promise<void> {
    if (!this.boss) return; // the sweeper of a started process picks it up
    const ahead = await this.repo.tenantBacklogAhead(workflowId);
    const jobId = await this.boss.send(
      WORKFLOW_QUEUE,
      { workflowId },
      {
        singletonKey: workflowId,
        priority: -Math.min(ahead, MAX_BACKLOG_RANK),
        ...(afterSeconds > 0 ? { startAfter: afterSeconds } : {}),
      },
    );
    // null: a job of this workflow is queued already (stately), and its id is kept from its own send.
    if (jobId) await this.repo.noteJob(workflowId, jobId);
  }

  /** Jobs of the workflow queue not yet finished (queued, retrying or running), from pg-boss's API. */
  async workflowJobsPending(): Promise<number> {
    if (!this.boss) throw new Error('batch runtime not started');
    return this.boss.getQueueSize(WORKFLOW_QUEUE, { before: 'completed' });
  }

  private async sendWebhook(job: WebhookDeliveryJob, delaySeconds: number): Promise<void> {
    if (!this.boss) throw new Error('batch runtime stopped');
    await this.boss.send(WEBHOOK_QUEUE, job, { startAfter: Math.ceil(delaySeconds) });
  }

  // ---------- operations used by the routes ----------

  /**
   * Early refusal of URLs that can never be fetched: not http(s), with
   * credentials, or an IP literal outside the allowed ranges. Host names are
   * checked when fetched, on the address actually connected to.
   */
  destinationAllowed(raw: string): boolean {
    let url: URL;
    try {
      url = OutboundClient.parseUrl(raw);
    } catch {
      return false;
    }
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    return !isIpLiteral(host) || this.outbound.policy.addressAllowed(host, url.hostname);
  }

  async submit(principal: Principal, body: JobRequest): Promise<JobAccepted> {
    const requestId = body.request_id ?? randomUUID();
    const params: WorkflowParams = {
      audio_url: body.audio_url,
      request_id: requestId,
      // `en-US`, `English`, `auto`: the workflow and its metadata carry the code (or no hint).
      language: normalizeLanguage(body.language),
      model: body.model,
      prompt: body.prompt,
      ...(principal.vocabulary ? { vocabulary: principal.vocabulary } : {}),
      // Defaults come from the schema (ajv fills them in); the config bounds them.
      segment_seconds: Math.max(body.segment_seconds, this.d.config.batch.minSegmentSeconds),
      response_format: body.response_format,
      concurrency: Math.max(
        1,
        Math.min(Math.floor(body.concurrency) || 1, this.d.config.batch.maxConcurrency),
      ),
      webhook_url: body.webhook_url,
      review: body.review,
      metadata: body.metadata,
      max_audio_seconds: principal.limits.maxAudioSecondsPerRequest,
      max_window_seconds: principal.limits.maxAudioSecondsPerWindow,
    };
    // A tenant's queue is bounded (every queued job keeps its parameters, up to ~70 KB): past it, only a
    // resubmission of a job it already has is answered.
    const cap = this.d.config.batch.maxUnfinishedPerTenant;
    if (
      (await this.repo.unfinished(principal.ownerId, cap)) >= cap &&
      !(await this.repo.activeFor(principal.ownerId, requestId))
    )
      throw new TooManyJobsError(cap);
    const { id, created } = await this.repo.createOrGetActive({
      id: newWorkflowId(),
      request_id: requestId,
      owner_id: principal.ownerId,
      key_id: principal.keyId,
      params,
    });
    if (created) {
      metrics.submitted.inc();
      await this.enqueue(id);
    }
    return {
      request_id: requestId,
      workflow_id: id,
      status: 'queued',
      endpoint: `GET /${id}`,
      poll_endpoint: `GET /v1/audio/transcriptions/jobs/${id}`,
    };
  }

  private secrets: Promise<string[]> | undefined;

  /** The operator's webhook secrets, current first (loaded once). */
  private webhookSecrets(): Promise<string[]> {
    this.secrets ??= loadWebhookSecrets(this.d.config.batch.webhook).catch((err) => {
      this.secrets = undefined;
      throw err;
    });
    return this.secrets;
  }

  /** The key a tenant verifies its webhooks with (the current one; docs/webhooks.md). */
  async webhookSecretFor(ownerId: string): Promise<string> {
    return tenantSecret((await this.webhookSecrets())[0], ownerId);
  }

  /**
   * Cancels the tenant's workflow (api/batch/cancel.ts). Undefined for
   * unknown ids and other tenants' workflows; otherwise whether it ended
   * now and its poll response.
   */
  async cancel(ownerId: string, workflowId: string): Promise<{ ended: boolean; poll: string } | undefined> {
    const ended = await this.cancellation.cancel(ownerId, workflowId);
    const poll = await this.poll(ownerId, workflowId);
    return poll === undefined ? undefined : { ended, poll };
  }

  /** A revoked key's unfinished workflows are terminated; how many. */
  cancelKeyJobs(keyId: string): Promise<number> {
    return this.cancellation.revokedKey(keyId);
  }

  /** The poll response (interface 2.3, JSON text) of the tenant's workflow; undefined for unknown ids and other tenants' workflows. */
  async poll(ownerId: string, workflowId: string): Promise<string | undefined> {
    return this.polls.poll(workflowId, ownerId);
  }

  /** A stored artifact of the tenant (key relative to its space, e.g. transcription/{request_id}/result.json). */
  async readArtifact(ownerId: string, key: string): Promise<unknown> {
    return tenantStore(this.store, ownerId).getJson(key);
  }
}

/**
 * The process's engine calls, shared between tenants (issue 41: a 93-chunk
 * job at concurrency 16 made another tenant's 9-chunk job 5x slower, first
 * come first served): a tenant alone uses every slot, beside others at most
 * half, and a freed slot goes to the tenant holding fewest.
 */
function engineShare(slots: number): FairShare {
  return new FairShare(slots, Math.max(1, Math.floor(slots / 2)));
}

/** The tenant already has BATCH_MAX_UNFINISHED_PER_TENANT jobs queued or running. */
export class TooManyJobsError extends Error {
  override name = 'TooManyJobsError';
  constructor(readonly cap: number) {
    super(`This tenant already has ${cap} jobs queued or running; submit more as they finish.`);
  }
}

export function newWorkflowId(): string {
  return `cf_${randomBytes(32).toString('hex')}`;
}
