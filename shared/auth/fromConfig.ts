import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import { PlanCatalog } from '../plans.js';
import { Authenticator } from './authenticator.js';
import { KeyStore } from './keyStore.js';

/** The plan catalog, key store and authenticator of a process, as every tier builds them. */
export function createAuthentication(
  config: Config,
  db: Knex,
  logger: Logger,
): { plans: PlanCatalog; keys: KeyStore; auth: Authenticator } {
  const plans = new PlanCatalog(config.plans.overrides);
  const keys = new KeyStore(db, plans);
  const auth = new Authenticator(
    keys,
    plans,
    {
      keyCacheTtlMs: config.auth.keyCacheTtlMs,
      lastUsedFlushMs: config.auth.lastUsedFlushMs,
      sessionTokenSecret: config.auth.sessionTokenSecret,
      sessionTokenTtlSeconds: config.auth.sessionTokenTtlSeconds,
    },
    logger,
  );
  return { plans, keys, auth };
}
