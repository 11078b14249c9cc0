import type { Knex } from 'knex';

/**
 * The usage ledger (docs/decisions.md, "Usage ledger"): a unit of usage is
 * written while it runs (a realtime session's checkpoints, status `live`,
 * holding a lease) and once when it ends (status `final`). A live row whose
 * lease ran out (its process died) is turned `lapsed` by any live process.
 * Additive: rows written before this migration are final; the columns the
 * usage report reads (key_id, plane, ref_id, audio_seconds, created_at) keep
 * their meaning.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('usage_events', (t) => {
    t.text('status').notNullable().defaultTo('final');
    t.timestamp('lease_expires_at', { useTz: true });
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.raw(
    `ALTER TABLE usage_events ADD CONSTRAINT usage_events_status_check CHECK (status IN ('live', 'final', 'lapsed'))`,
  );
  // The reconciler's scan: only live rows, by lease.
  await knex.raw(
    `CREATE INDEX usage_events_live_lease_idx ON usage_events (lease_expires_at) WHERE status = 'live'`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP INDEX IF EXISTS usage_events_live_lease_idx');
  await knex.raw('ALTER TABLE usage_events DROP CONSTRAINT IF EXISTS usage_events_status_check');
  await knex.schema.alterTable('usage_events', (t) => {
    t.dropColumn('status');
    t.dropColumn('lease_expires_at');
    t.dropColumn('updated_at');
  });
}
