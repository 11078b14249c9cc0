/**
 * The platform kernel: the resources every serving process shares (the
 * database, authentication, limits, the usage ledger and audio budget, the
 * speech engine), built in one place from the configuration and closed by
 * one `close()` in the right order (the ledger flushes while the database is
 * still there; the database goes last). The API (api/deps.ts) adds its
 * batch plane and readiness on top; the realtime tier (realtime/main.ts)
 * uses it as it is.
 */
import type { Knex } from 'knex';
import type { Config } from './config/index.js';
import type { Logger } from './logger.js';
import { createDb } from './db/index.js';
import { createAuthentication, type Authenticator, type KeyStore } from './auth/index.js';
import { createLimits, type LimitsDriver } from './limits/index.js';
import { createSpeechEngine } from './stt/index.js';
import type { SpeechEngine } from './stt/types.js';
import { UsageLedger } from './usage.js';
import { UsageBudget } from './usage/budget.js';
import type { PlanCatalog } from './plans.js';

export interface Platform {
  readonly config: Config;
  readonly logger: Logger;
  readonly db: Knex;
  readonly plans: PlanCatalog;
  readonly keys: KeyStore;
  readonly auth: Authenticator;
  readonly limits: LimitsDriver;
  readonly ledger: UsageLedger;
  /** The plan's audio budget, the one of this process: every plane reserves, bills and releases through it. */
  readonly budget: UsageBudget;
  /** The speech engine of this process (its decoders load now, not on the first request). */
  readonly speech: ReturnType<typeof createSpeechEngine>;
  /** Closes everything above, the database last; never throws. */
  close(): Promise<void>;
}

/**
 * What a caller may bring instead of the platform building it: a speech engine
 * it owns (not closed by the platform; tests share one engine across many
 * platforms) and the Redis key prefix (tests keep their limits apart).
 */
export interface PlatformParts {
  speech?: SpeechEngine;
  limitsPrefix?: string;
}

export function createPlatform(config: Config, logger: Logger, parts: PlatformParts = {}): Platform {
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required (the embedded start provides one)');
  const db = createDb(config.databaseUrl, { poolMax: config.dbPoolMax, logger });
  const { plans, keys, auth } = createAuthentication(config, db, logger);
  const limits = createLimits(config.redisUrl, parts.limitsPrefix);
  const ledger = new UsageLedger(db, config.ledger, logger).start();
  const budget = new UsageBudget(db, config.usageWindowSeconds, ledger);
  const speech = parts.speech ? borrowed(parts.speech) : createSpeechEngine(config, logger);
  return {
    config,
    logger,
    db,
    plans,
    keys,
    auth,
    limits,
    ledger,
    budget,
    speech,
    async close() {
      await ledger.close().catch(() => {});
      await auth.close().catch(() => {});
      await limits.close().catch(() => {});
      await speech.close().catch(() => {});
      await db.destroy().catch(() => {});
    },
  };
}

/** An engine the caller owns, as the platform's: its close is the caller's. */
function borrowed(engine: SpeechEngine): Platform['speech'] {
  return {
    transcribe: (req) => engine.transcribe(req),
    openStream: engine.openStream && (() => engine.openStream!()),
    startStreaming: engine.startStreaming && (() => engine.startStreaming!()),
    languages: () => engine.languages(),
    healthy: () => engine.healthy(),
    ready: async () => {},
    workerIds: () => [],
    close: async () => {},
  };
}

/**
 * Refuses to start when active keys hold plans the catalog no longer
 * defines (issue 41: such a key was served and billed as `free` while its
 * usage report said 0 s left). The operator defines the plan again in
 * PLANS_JSON, or revokes those keys and issues new ones on another plan.
 */
export async function assertKeyPlansKnown(platform: Pick<Platform, 'db' | 'plans'>): Promise<void> {
  const rows = await platform
    .db('api_keys')
    .where({ status: 'active' })
    .whereNull('revoked_at')
    .andWhere((q) => {
      void q.whereNull('expires_at').orWhere('expires_at', '>', platform.db.fn.now());
    })
    .groupBy('plan')
    .select('plan')
    .count<{ plan: string; count: string }[]>('* as count');
  const unknown = rows.filter((r) => !platform.plans.has(r.plan));
  if (!unknown.length) return;
  const list = unknown.map((r) => `"${r.plan}" (${r.count} keys)`).join(', ');
  throw new Error(
    `Active API keys use plans that PLANS_JSON no longer defines: ${list}. Define them again in PLANS_JSON, or revoke those keys and issue new ones on a defined plan.`,
  );
}
