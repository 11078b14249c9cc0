import type { Knex } from 'knex';

/**
 * Crashed runs of a workflow (issue 41): `lapses` counts the runs whose lease
 * lapsed and was taken over by another runner, that is, runs whose process
 * died or hung holding the workflow. A workflow that has taken down
 * `quarantineAfterCrashes` workers (shared/config/batch.ts) is errored
 * instead of run again (api/batch/workflow.ts).
 *
 * And each tenant's line of unfinished workflows, which the fair queue
 * ranks jobs by (WorkflowRepo.tenantBacklogAhead), and the finished ones by
 * age, which retention deletes (WorkflowRepo.expired).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.integer('lapses').notNullable().defaultTo(0);
  });
  await knex.raw(
    `CREATE INDEX batch_workflows_tenant_line ON batch_workflows (owner_id, created_at, id)
      WHERE status IN ('queued', 'running')`,
  );
  await knex.raw(
    `CREATE INDEX batch_workflows_ended ON batch_workflows (ended_at)
      WHERE status NOT IN ('queued', 'running')`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP INDEX IF EXISTS batch_workflows_tenant_line');
  await knex.raw('DROP INDEX IF EXISTS batch_workflows_ended');
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.dropColumn('lapses');
  });
}
