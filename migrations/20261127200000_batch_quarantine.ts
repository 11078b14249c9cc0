import type { Knex } from 'knex';

/**
 * Crashed runs of a workflow (issue 41): `lapses` counts the runs whose lease
 * lapsed and was taken over by another runner, that is, runs whose process
 * died or hung holding the workflow. A workflow that has taken down
 * `quarantineAfterCrashes` workers (shared/config/batch.ts) is errored
 * instead of run again (api/batch/workflow.ts).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.integer('lapses').notNullable().defaultTo(0);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.dropColumn('lapses');
  });
}
