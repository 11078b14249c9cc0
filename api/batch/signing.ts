/**
 * Webhook signing keys (docs/webhooks.md). The operator's secret
 * (`WEBHOOK_SECRET`, or one generated once into DATA_DIR) is never used to
 * sign directly: each tenant signs with its own key derived from it, so a
 * tenant cannot send another tenant's receiver a message that verifies
 * (issue 41). Tenants read their key with `GET /v1/webhooks/secret`.
 *
 * Rotation: `WEBHOOK_SECRET` may hold several secrets separated by spaces;
 * the first is current, and each message carries one signature per secret
 * (Standard Webhooks allows several), so receivers keep verifying while they
 * move to their new key. Then the old secret is dropped.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { Webhook } from 'standardwebhooks';
import type { WebhookConfig } from '../../shared/config/batch.js';

const PREFIX = 'whsec_';

/** The operator's secrets, current first: the configured ones, or one generated once and kept (0600) in DATA_DIR. */
export async function loadWebhookSecrets(cfg: WebhookConfig): Promise<string[]> {
  const secrets = (cfg.secret ?? '').split(/\s+/).filter(Boolean);
  if (secrets.length) {
    for (const s of secrets) tenantSecret(s, 'check');
    return secrets;
  }
  try {
    return [(await fsp.readFile(cfg.secretFile, 'utf8')).trim()];
  } catch {
    const secret = `${PREFIX}${randomBytes(32).toString('base64')}`;
    await fsp.mkdir(path.dirname(cfg.secretFile), { recursive: true });
    try {
      await fsp.writeFile(cfg.secretFile, secret + '\n', { mode: 0o600, flag: 'wx' });
      return [secret];
    } catch {
      return [(await fsp.readFile(cfg.secretFile, 'utf8')).trim()]; // another process won the race
    }
  }
}

/** A tenant's signing key (`whsec_` + base64): HMAC-SHA256 of its owner id under the operator's secret. */
export function tenantSecret(operatorSecret: string, ownerId: string): string {
  if (!operatorSecret.startsWith(PREFIX))
    throw new Error('WEBHOOK_SECRET must be "whsec_" followed by base64 (Standard Webhooks format)');
  const key = Buffer.from(operatorSecret.slice(PREFIX.length), 'base64');
  if (key.length < 16) throw new Error('WEBHOOK_SECRET must hold at least 16 bytes after "whsec_"');
  const derived = createHmac('sha256', key).update(`stt-webhook-tenant\0${ownerId}`).digest('base64');
  return PREFIX + derived;
}

/** Standard Webhooks headers, with one `v1,` signature per secret (current first). */
export function signedHeaders(
  secrets: string | readonly string[],
  messageId: string,
  at: Date,
  body: string,
): Record<string, string> {
  const all = typeof secrets === 'string' ? [secrets] : secrets;
  return {
    'content-type': 'application/json',
    'user-agent': 'stt-service-webhooks/1',
    'webhook-id': messageId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': all.map((s) => new Webhook(s).sign(messageId, at, body)).join(' '),
  };
}
