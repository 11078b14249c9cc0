/**
 * Webhook delivery (docs/webhooks.md). Standard Webhooks signing:
 * `webhook-id` (stable across retries, so receivers can de-duplicate),
 * `webhook-timestamp` (seconds) and `webhook-signature` = `v1,` + base64
 * HMAC-SHA256 over `{id}.{timestamp}.{body}` with the tenant's own key
 * (api/batch/signing.ts).
 * Each attempt is recorded in batch_webhook_deliveries; failures are retried
 * through the pg-boss queue (startAfter) with exponential backoff and full
 * jitter over several hours; a 410 Gone stops retrying at once.
 */
import type { Logger } from 'pino';
import type { BatchConfig, WebhookConfig } from '../../shared/config/batch.js';
import { OutboundClient, OutboundError } from './net/index.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';
import type { WorkflowRepo, WorkflowRow } from './repo.js';
import { artifactKeys } from './artifacts.js';
import { STEPS } from './steps/order.js';
import { signedHeaders, tenantSecret } from './signing.js';

export interface WebhookPayload {
  type: 'transcription.completed' | 'transcription.failed';
  timestamp: string;
  data: {
    workflow_id: string;
    request_id: string;
    /** The tenant and key that submitted the job: a receiver shared by tenants tells them apart. */
    owner_id: string;
    key_id: string;
    status: string;
    result: unknown;
    reviewed_result: unknown;
    error: { name: string; message: string } | null;
    artifacts: { result: string | null; reviewed_result: string | null };
  };
}

/** Delay before retry number `failures` (1 = after the first failure): exponential, capped, full jitter in [50%, 100%]. */
export function backoffSeconds(
  failures: number,
  cfg: Pick<WebhookConfig, 'baseDelaySeconds' | 'maxDelaySeconds'>,
  rand = Math.random,
): number {
  const exp = Math.min(cfg.maxDelaySeconds, cfg.baseDelaySeconds * 2 ** Math.max(0, failures - 1));
  return Math.round(exp * (0.5 + 0.5 * rand()) * 1000) / 1000;
}

/** How long a delivery waits when its receiver is busy with this process's others. */
const RECEIVER_BUSY_DELAY_SECONDS = 1;

/** The receiver a URL names: host and port (paths of one server share its capacity). */
function receiverOf(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || (u.protocol === 'https:' ? 443 : 80)}`;
  } catch {
    return url;
  }
}

export interface WebhookDeliveryJob {
  workflowId: string;
  attempt: number;
}

export class WebhookDeliverer {
  constructor(
    private readonly d: {
      repo: WorkflowRepo;
      store: ArtifactStore;
      outbound: OutboundClient;
      config: BatchConfig;
      /** The operator's secrets, current first (api/batch/signing.ts). */
      secrets: readonly string[];
      logger: Logger;
      /** Queue another attempt after a delay. */
      schedule(job: WebhookDeliveryJob, delaySeconds: number): Promise<void>;
    },
  ) {}

  /** The message of a finished workflow (its results read from the row, or the store). */
  private async payload(
    row: WorkflowRow,
    url: string,
  ): Promise<{ url: string; body: string; ownerId: string }> {
    const store = tenantStore(this.d.store, row.owner_id);
    const keys = artifactKeys(row.request_id);
    const complete = row.status === 'complete';
    const reviewed = complete && row.params.review ? await store.getJson(keys.reviewedResult) : null;
    const result = complete ? (row.output.result ?? (await store.getJson(keys.result))) : null;
    const payload: WebhookPayload = {
      type: complete ? 'transcription.completed' : 'transcription.failed',
      timestamp: (row.ended_at ?? new Date()).toISOString(),
      data: {
        workflow_id: row.id,
        request_id: row.request_id,
        owner_id: row.owner_id,
        key_id: row.key_id,
        status: row.status,
        result,
        reviewed_result: reviewed,
        error: row.error,
        artifacts: {
          result: complete ? keys.result : null,
          reviewed_result: reviewed ? keys.reviewedResult : null,
        },
      },
    };
    return { url, body: JSON.stringify(payload), ownerId: row.owner_id };
  }

  /** Deliveries in flight from this process, per tenant and per tenant's receiver (`host:port`). */
  private readonly inFlight = new Map<string, number>();

  /**
   * One delivery attempt. A tenant's receiver already holding `perReceiver`
   * of this process's deliveries, or a tenant holding half of them, is not
   * called: the job is queued again shortly (not an attempt). So a receiver
   * that hangs holds only its tenant's share and the other tenants'
   * deliveries leave at once (issue 41: one slow receiver delayed every
   * tenant's webhooks by minutes).
   */
  async deliver(
    job: WebhookDeliveryJob,
  ): Promise<'delivered' | 'failed' | 'gone' | 'abandoned' | 'skipped' | 'deferred'> {
    const row = await this.d.repo.get(job.workflowId);
    const url = row?.params.webhook_url;
    if (!row || !url) return 'skipped';
    const { concurrency, perReceiver } = this.d.config.webhook;
    const slots: [string, number][] = [
      [`tenant ${row.owner_id}`, Math.max(1, Math.floor(concurrency / 2))],
      [`receiver ${row.owner_id} ${receiverOf(url)}`, perReceiver],
    ];
    if (slots.some(([k, cap]) => (this.inFlight.get(k) ?? 0) >= cap)) {
      await this.d.schedule(job, RECEIVER_BUSY_DELAY_SECONDS);
      return 'deferred';
    }
    for (const [k] of slots) this.inFlight.set(k, (this.inFlight.get(k) ?? 0) + 1);
    try {
      // Built only for an attempt: a delivery put back for its receiver's share reads no results.
      return await this.attempt(job, await this.payload(row, url));
    } finally {
      for (const [k] of slots) {
        const left = (this.inFlight.get(k) ?? 1) - 1;
        if (left > 0) this.inFlight.set(k, left);
        else this.inFlight.delete(k);
      }
    }
  }

  private async attempt(
    job: WebhookDeliveryJob,
    p: { url: string; body: string; ownerId: string },
  ): Promise<'delivered' | 'failed' | 'gone' | 'abandoned' | 'skipped'> {
    const { repo, config, logger } = this.d;
    const wh = config.webhook;
    // A job queued again by the sweeper while the original was only late: one attempt each.
    if ((await repo.lastDeliveryAttempt(job.workflowId)) >= job.attempt) return 'skipped';
    const messageId = `msg_${job.workflowId}`;
    const at = new Date();
    const started = Date.now();
    let status: number | null = null;
    let error: string | null = null;
    let permanent = false;
    await repo.stepStart(job.workflowId, STEPS.webhook);
    try {
      const res = await this.d.outbound.request(p.url, {
        method: 'POST',
        headers: signedHeaders(
          this.d.secrets.map((s) => tenantSecret(s, p.ownerId)),
          messageId,
          at,
          p.body,
        ),
        body: p.body,
        timeoutMs: wh.timeoutMs,
        // The status is the receipt; what the receiver writes after it is not read (a 200 with a large body was retried).
        statusOnly: true,
      });
      status = res.status;
    } catch (err) {
      error = (err as Error).message;
      // A refused destination will not become acceptable by waiting.
      permanent =
        err instanceof OutboundError && (err.code === 'blocked_destination' || err.code === 'invalid_url');
    }
    const duration_ms = Date.now() - started;
    const base = {
      workflow_id: job.workflowId,
      message_id: messageId,
      attempt: job.attempt,
      url: p.url,
      status_code: status,
      error,
      duration_ms,
    };
    if (status !== null && status >= 200 && status < 300) {
      await repo.recordDelivery({ ...base, outcome: 'delivered', next_attempt_at: null });
      await repo.stepSet(job.workflowId, STEPS.webhook, 'complete');
      return 'delivered';
    }
    if (status === 410) {
      await repo.recordDelivery({ ...base, outcome: 'gone', next_attempt_at: null });
      await repo.stepSet(job.workflowId, STEPS.webhook, 'errored', 'receiver answered 410 Gone; not retried');
      return 'gone';
    }
    error ??= `receiver answered HTTP ${status}`;
    if (job.attempt >= wh.maxAttempts || permanent) {
      await repo.recordDelivery({ ...base, error, outcome: 'abandoned', next_attempt_at: null });
      await repo.stepSet(
        job.workflowId,
        STEPS.webhook,
        'errored',
        `gave up after ${job.attempt} attempt(s): ${error}`,
      );
      return 'abandoned';
    }
    const delay = backoffSeconds(job.attempt, wh);
    await repo.recordDelivery({
      ...base,
      error,
      outcome: 'failed',
      next_attempt_at: new Date(Date.now() + delay * 1000),
    });
    await repo.stepSet(job.workflowId, STEPS.webhook, 'waiting', error);
    logger.info(
      { workflowId: job.workflowId, attempt: job.attempt, delay, error },
      'webhook attempt failed; retry scheduled',
    );
    await this.d.schedule({ workflowId: job.workflowId, attempt: job.attempt + 1 }, delay);
    return 'failed';
  }
}
