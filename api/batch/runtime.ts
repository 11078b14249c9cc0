/**
 * The batch plane of one API process: the pg-boss queues (workflow runs,
 * the workflows pg-boss gave up on, webhook deliveries), the workers that
 * run them, the sweeper of what pg-boss does not know about (retention,
 * lost webhook deliveries), and the submission/poll/artifact operations the
 * routes call.
 *
 * Built by the API's composition root (api/deps.ts) and handed to the routes;
 * the server calls `start` at start-up and `stop` at shutdown. A submission
 * made before start starts the producer side (pg-boss and its queues) first.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { fromKnex, type PgBoss, type SendOptions } from 'pg-boss';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../../shared/config/index.js';
import type { Principal } from '../../shared/auth/index.js';
import { isIpLiteral, OutboundClient } from './net/index.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';
import type { SpeechEngine } from '../../shared/stt/types.js';
import type { UsageBudget } from '../../shared/usage/budget.js';
import * as metrics from './metrics.js';
import { PollReader } from './poll.js';
import { WorkflowRepo } from './repo.js';
import type { JobRequest, WorkflowParams } from './types.js';
import { WebhookDeliverer, type WebhookDeliveryJob } from './webhook.js';
import { loadWebhookSecrets, tenantSecret } from './signing.js';
import { FairShare } from '../../shared/fairShare.js';
import { openBoss, MAX_BACKLOG_RANK, WEBHOOK_QUEUE, WORKFLOW_DEAD_QUEUE, WORKFLOW_QUEUE } from './queues.js';
import { ByteBudget } from '../../shared/semaphore.js';
import { Retention } from './retention.js';
import { Cancellation } from './cancel.js';
import { type RunJob, type RunnerHooks, WorkflowRunner } from './workflow.js';
import { normalizeLanguage } from '../../shared/stt/language.js';

export { WORKFLOW_QUEUE, WORKFLOW_DEAD_QUEUE, WEBHOOK_QUEUE } from './queues.js';

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
  /** pg-boss started and its queues made (the producer side, which submissions need). */
  private producing: Promise<PgBoss> | undefined;
  private starting: Promise<void> | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private runner: WorkflowRunner | undefined;
  private deliverer: WebhookDeliverer | undefined;
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
      (jobIds) => this.cancelJobs(jobIds),
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

  /** The process's pg-boss (queues.ts `openBoss`), opened once and shared by submissions and workers. */
  private produce(): Promise<PgBoss> {
    this.producing ??= this.startBoss().catch((err: unknown) => {
      this.producing = undefined;
      throw err;
    });
    return this.producing;
  }

  private async startBoss(): Promise<PgBoss> {
    await this.store.init();
    const boss = await openBoss({
      config: this.d.config,
      db: this.d.db,
      repo: this.repo,
      log: this.log,
      enqueue: (id, b) => this.enqueue(id, 0, b),
    });
    this.boss = boss;
    return boss;
  }

  private async doStart(workers: boolean): Promise<void> {
    const cfg = this.d.config;
    const boss = await this.produce();
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
      requeue: (id, afterSeconds) => this.enqueue(id, afterSeconds),
      jobHeld: (job) => this.jobHeld(job),
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
    // One job per handler call; pg-boss heart-beats it while the handler runs and aborts job.signal
    // when the job is no longer this worker's, which stops the run.
    await boss.work<{ workflowId: string }>(
      WORKFLOW_QUEUE,
      { batchSize: 1, pollingIntervalSeconds: 0.5, localConcurrency: cfg.batch.workflowsPerProcess },
      async ([job]) => {
        await runner.run(job.data.workflowId, { id: job.id, retryCount: job.retryCount, signal: job.signal });
      },
    );
    // A workflow whose job failed every attempt: errored (and its webhook sent), not left running.
    await boss.work<{ workflowId: string }>(
      WORKFLOW_DEAD_QUEUE,
      { batchSize: 1, pollingIntervalSeconds: 2 },
      async ([job]) => {
        await runner.abandon(job.data.workflowId);
      },
    );
    // Several deliveries at once, each receiver at most its share of them (WebhookDeliverer.deliver).
    await boss.work<WebhookDeliveryJob>(
      WEBHOOK_QUEUE,
      { batchSize: 1, pollingIntervalSeconds: 0.5, localConcurrency: cfg.batch.webhook.concurrency },
      async ([job]) => {
        metrics.webhookAttempts.inc({ outcome: await deliverer.deliver(job.data) });
      },
    );
    const sweep = () => {
      this.sweep().catch((err) => this.log.warn({ err }, 'batch sweep failed'));
    };
    sweep();
    this.sweeper = setInterval(sweep, cfg.batch.sweepIntervalMs);
    this.sweeper.unref();
  }

  async stop(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    // One being started is stopped once it is.
    await this.starting?.catch(() => {});
    await this.producing?.catch(() => {});
    const boss = this.boss;
    // No new runs here; the ones in progress give their workflows back (queued again for another
    // process) and their handlers return before pg-boss stops.
    const fetching = boss?.offWork(WORKFLOW_QUEUE, { wait: true }).catch(() => {});
    await this.runner?.shutdown();
    await fetching;
    this.boss = undefined;
    this.producing = undefined;
    this.starting = undefined;
    if (boss)
      await boss
        .stop({ graceful: true, timeout: 5000 })
        .catch((err) => this.log.warn({ err }, 'pg-boss stop'));
    await this.store.close();
  }

  /**
   * What pg-boss cannot know about: finished workflows past retention, and
   * webhook deliveries that are due but were never queued or rescheduled
   * (their process died between the two). How many deliveries it queued.
   */
  async sweep(): Promise<number> {
    await this.retention.expire();
    if (!this.boss) return 0;
    const lost = await this.repo.lostWebhooks(this.d.config.batch.webhook.recoverAfterSeconds);
    // One job per lost attempt a minute: a sweep that finds it again first queues none to run beside it.
    for (const w of lost) {
      const once = { singletonKey: `lost:${w.id}:${w.attempt}`, singletonSeconds: 60 };
      await this.sendWebhook({ workflowId: w.id, attempt: w.attempt }, 0, once);
    }
    if (lost.length) this.log.warn({ count: lost.length }, 'lost webhook deliveries queued again');
    return lost.length;
  }

  /** Whether the run's job is still this worker's: a heartbeat of it (fenced to its attempt) says. */
  private async jobHeld(job: RunJob): Promise<boolean> {
    if (!this.boss) return false;
    const res = (await this.boss.touch(WORKFLOW_QUEUE, [{ id: job.id, retryCount: job.retryCount }])) as {
      affected?: number;
      settled?: string[];
    };
    return res.settled ? res.settled.includes(job.id) : (res.affected ?? 0) > 0;
  }

  /** Terminated workflows' jobs: a queued one never starts, a running one's heartbeat stops its run. */
  private async cancelJobs(jobIds: string[]): Promise<void> {
    if (!this.boss || !jobIds.length) return;
    await this.boss
      .cancel(WORKFLOW_QUEUE, jobIds)
      .catch((err) => this.log.warn({ err }, 'could not cancel the jobs of terminated workflows'));
  }

  /**
   * Queues a run of the workflow. Fair between tenants: pg-boss hands out
   * jobs by priority, then age, and a workflow's priority is minus the
   * number of its tenant's unfinished workflows submitted before it, so
   * every tenant's first job comes before any tenant's second, whatever the
   * backlog (issue 41: behind 300 jobs of one tenant, another's started
   * 134 s after submission). `db`: a transaction to send it in.
   */
  private async enqueue(
    workflowId: string,
    afterSeconds = 0,
    boss?: PgBoss,
    db: Knex = this.d.db,
  ): Promise<void> {
    const b = boss ?? (await this.produce());
    const ahead = await new WorkflowRepo(db).tenantBacklogAhead(workflowId);
    const jobId = await b.send(
      WORKFLOW_QUEUE,
      { workflowId },
      {
        singletonKey: workflowId,
        priority: -Math.min(ahead, MAX_BACKLOG_RANK),
        ...(afterSeconds > 0 ? { startAfter: afterSeconds } : {}),
        ...(db !== this.d.db ? { db: fromKnex(db) } : {}),
      },
    );
    // null: a job of this workflow is queued already (stately), and its id is kept from its own send.
    if (jobId) await new WorkflowRepo(db).noteJob(workflowId, jobId);
  }

  /** Jobs of the workflow queue not yet finished (queued, retrying or running), from pg-boss's API. */
  async workflowJobsPending(): Promise<number> {
    const boss = this.boss;
    if (!boss) throw new Error('batch runtime not started');
    // Counted from the jobs themselves: pg-boss's queue counts are a cache refreshed by its monitor.
    let pending = 0;
    for (let after: string | undefined; ;) {
      const page = await boss.findJobs(WORKFLOW_QUEUE, { limit: 10_000, ...(after ? { after } : {}) });
      pending += page.filter((j) => ['created', 'retry', 'active'].includes(j.state)).length;
      if (page.length < 10_000) return pending;
      after = page[page.length - 1].id;
    }
  }

  private async sendWebhook(job: WebhookDeliveryJob, delay: number, once?: SendOptions): Promise<void> {
    if (!this.boss) throw new Error('batch runtime stopped');
    await this.boss.send(WEBHOOK_QUEUE, job, { startAfter: Math.ceil(delay), ...once });
  }

  // ---------- operations used by the routes ----------

  /**
   * Early refusal of URLs that can never be fetched: not http(s), with
   * credentials, or an IP literal outside the allowed ranges. Host names are
   * checked when fetched, on the address actually connected to. Returns why
   * the URL is refused (a sentence), or null when it may be fetched.
   */
  destinationRefusal(raw: string): string | null {
    let url: URL;
    try {
      url = OutboundClient.parseUrl(raw);
    } catch (err) {
      return err instanceof Error ? err.message : 'The URL is not allowed.';
    }
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    if (!isIpLiteral(host) || this.outbound.policy.addressAllowed(host, url.hostname)) return null;
    return 'Loopback and private addresses are refused unless the server setting OUTBOUND_ALLOW lists them.';
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
    // The workflow and its pg-boss job are written in one transaction: neither exists without the other.
    const boss = await this.produce();
    const { id, created } = await this.d.db.transaction(async (trx) => {
      const made = await new WorkflowRepo(trx).createOrGetActive({
        id: newWorkflowId(),
        request_id: requestId,
        owner_id: principal.ownerId,
        key_id: principal.keyId,
        params,
      });
      if (made.created) await this.enqueue(made.id, 0, boss, trx);
      return made;
    });
    if (created) metrics.submitted.inc();
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
