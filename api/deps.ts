/**
 * Everything a request handler may need, built once per process from the
 * config: the database, the plan catalog, key store and authenticator, the
 * limits driver, the OpenAPI registry. Later planes add theirs here.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../shared/config/index.js';
import { createDb, pingDb } from '../shared/db/index.js';
import type { PlanCatalog } from '../shared/plans.js';
import { type Authenticator, type KeyStore, createAuthentication } from '../shared/auth/index.js';
import { createLimits, type LimitsDriver } from '../shared/limits/index.js';
import type { SpeechEngine } from '../shared/stt/types.js';
import { UsageLedger } from '../shared/usage.js';
import { OpenApiRegistry } from './openapi/registry.js';

export interface ReadinessCheck {
  name: string;
  check: () => Promise<boolean>;
}

export interface AppDeps {
  config: Config;
  logger: Logger;
  db: Knex;
  plans: PlanCatalog;
  keys: KeyStore;
  auth: Authenticator;
  limits: LimitsDriver;
  /** Billing of every plane (segment, batch) in this process. */
  ledger: UsageLedger;
  openapi: OpenApiRegistry;
  /** Extra checks for /readyz (speech engine, realtime upstream, ...). */
  readiness: ReadinessCheck[];
  speech?: SpeechEngine;
  /** Closers run at shutdown, last added first. */
  closers: (() => Promise<void>)[];
}

export function createDeps(config: Config, logger: Logger): AppDeps {
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required (the embedded start provides one)');
  const db = createDb(config.databaseUrl, { poolMax: config.dbPoolMax, logger });
  const { plans, keys, auth } = createAuthentication(config, db, logger);
  const limits = createLimits(config.redisUrl);
  const deps: AppDeps = {
    config,
    logger,
    db,
    plans,
    keys,
    auth,
    limits,
    ledger: new UsageLedger(db, config.ledger, logger).start(),
    openapi: new OpenApiRegistry(),
    readiness: [{ name: 'database', check: () => pingDb(db) }],
    closers: [],
  };
  if (limits.kind === 'redis') deps.readiness.push({ name: 'redis', check: () => limits.ping() });
  return deps;
}

export async function closeDeps(deps: AppDeps): Promise<void> {
  for (const close of [...deps.closers].reverse()) {
    try {
      await close();
    } catch (err) {
      deps.logger.warn({ err }, 'error while closing');
    }
  }
  await deps.ledger.close().catch(() => {});
  await deps.auth.close().catch(() => {});
  await deps.limits.close().catch(() => {});
  await deps.speech?.close().catch(() => {});
  await deps.db.destroy().catch(() => {});
}
