import type { Knex } from 'knex';

/**
 * The poll response kept on the workflow row once presented (api/batch/poll.ts),
 * so that a poll of an unchanged workflow is one read of one text column sent
 * as it is. Written by the repository, not by triggers (api/batch/repo.ts):
 * every write that changes what a poll shows clears `poll_body` and bumps
 * `poll_rev` in the same statement; the next poll presents the row again and
 * stores its body only if `poll_rev` has not moved since it read the row.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.text('poll_body');
    t.integer('poll_rev').notNullable().defaultTo(0);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.dropColumn('poll_rev');
    t.dropColumn('poll_body');
  });
}
