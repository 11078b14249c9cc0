import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('api_keys', (t) => {
    t.text('id').primary();
    t.text('owner_id').notNullable().defaultTo('default');
    t.text('plan').notNullable();
    t.text('label');
    t.text('key_hash').notNullable().unique();
    t.text('key_prefix').notNullable();
    t.text('last_four').notNullable();
    t.text('status').notNullable().defaultTo('active');
    t.timestamp('expires_at', { useTz: true });
    t.timestamp('revoked_at', { useTz: true });
    t.timestamp('last_used_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['owner_id', 'created_at']);
  });
  await knex.schema.createTable('usage_events', (t) => {
    t.bigIncrements('id').primary();
    t.text('key_id').notNullable().references('api_keys.id');
    t.text('plane').notNullable();
    t.text('ref_id');
    t.double('audio_seconds').notNullable().defaultTo(0);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['key_id', 'created_at']);
    // One final record per (plane, ref) makes metering idempotent (flushed exactly once).
    t.unique(['plane', 'ref_id']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('usage_events');
  await knex.schema.dropTableIfExists('api_keys');
}
