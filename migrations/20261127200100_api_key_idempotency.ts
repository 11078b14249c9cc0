import type { Knex } from 'knex';

/**
 * Key issuance idempotent on the client's `Idempotency-Key` (issue 41): the
 * key named by it, and the fingerprint of the request that issued it, so a
 * retry after a lost answer gets the same key (with a new secret) instead of
 * a second active key whose plaintext nobody received.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('api_keys', (t) => {
    t.text('idempotency_key').nullable().unique();
    t.text('request_fingerprint').nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('api_keys', (t) => {
    t.dropColumn('request_fingerprint');
    t.dropColumn('idempotency_key');
  });
}
