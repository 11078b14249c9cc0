/**
 * Webhook delivery (docs/webhooks.md). Standard Webhooks signing:
 * `webhook-id` (stable across retries, so receivers can de-duplicate),
 * `webhook-timestamp` (seconds) and `webhook-signature` = `v1,` + base64
 * HMAC-SHA256 over `{id}.{timestamp}.{body}` with the secret's key bytes.
 * Each attempt is recorded in batch_webhook_deliveries; failures are retried
 * through the pg-boss queue (startAfter) with exponential backoff and full
 * jitter over several hours; a 410 Gone stops retrying at once.
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { Webhook } from 'standardwebhooks';
import type { BatchConfig, WebhookConfig } from '../../shared/config/batch.js';
import { OutboundClient, OutboundError } from './net/index.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';
import type { WorkflowRepo } from './repo.js';
import { artifactKeys } from './artifacts.js';
import { STEPS } from './steps/order.js';

export interface WebhookPayload {
  type: 'transcription.completed' | 'transcription.failed';
  timestamp: string;
  data: {
    workflow_id: string;
    request_id: string;
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

export function signedHeaders(
  secret: string,
  messageId: string,
  at: Date,
  body: string,
): Record<string, string> {
  return {
    'content-type': 'application/json',
    'user-agent': 'stt-service-webhooks/1',
    'webhook-id': messageId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(messageId, at, body),
  };
}

/** The configured secret, or one generated once and kept (0600) in DATA_DIR so restarts keep verifying. */
export async function loadWebhookSecret(cfg: WebhookConfig): Promise<string> {
  if (cfg.secret) return cfg.secret;
  try {
    return (await fsp.readFile(cfg.secretFile, 'utf8')).trim();
  } catch {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    await fsp.mkdir(path.dirname(cfg.secretFile), { recursive: true });
    try {
      await fsp.writeFile(cfg.secretFile, secret + '\n', { mode: 0o600, flag: 'wx' });
      return secret;
    } catch {
      return (await fsp.readFile(cfg.secretFile, 'utf8')).trim(); // another process won the race
    }
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
      secret: string;
      logger: Logger;
      /** Queue another attempt after a delay. */
      schedule(job: WebhookDeliveryJob, delaySeconds: number): Promise<void>;
    },
  ) {}

  async payload(workflowId: string): Promise<{ url: string; body: string } | null> {
    const row = await this.d.repo.get(workflowId);
    if (!row?.params.webhook_url) return null;
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
    return { url: row.params.webhook_url, body: JSON.stringify(payload) };
  }

  /** One delivery attempt. */
  async deliver(job: WebhookDeliveryJob): Promise<'delivered' | 'failed' | 'gone' | 'abandoned' | 'skipped'> {
    const { repo, config, logger } = this.d;
    const wh = config.webhook;
    const p = await this.payload(job.workflowId);
    if (!p) return 'skipped';
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
        headers: signedHeaders(this.d.secret, messageId, at, p.body),
        body: p.body,
        timeoutMs: wh.timeoutMs,
        maxBytes: wh.maxResponseBytes,
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
