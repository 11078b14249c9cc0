import type { Knex } from 'knex';

/**
 * Audio-budget reservations (shared/usage/budget.ts): seconds a unit of work
 * (a segment upload, a batch job, a realtime session) holds against its key's
 * rolling window from admission until its usage is billed, so concurrent work
 * cannot overspend the window. Keyed like usage_events, by (plane, ref_id):
 * once the unit's usage row exists, only what is left of the reservation
 * beyond it counts. Expired reservations (their process died) count nothing.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('usage_reservations', (t) => {
    t.text('plane').notNullable();
    t.text('ref_id').notNullable();
    t.text('key_id').notNullable();
    t.double('audio_seconds').notNullable();
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['plane', 'ref_id']);
    t.index(['key_id', 'expires_at']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('usage_reservations');
}
