import type { Knex } from 'knex';

/**
 * pg-boss 12 (issue 40): whether a run is alive is now its pg-boss job's
 * heartbeat, not a lease on the workflow row, so `lease_until` goes (with
 * its index) and `lease_owner` becomes `run_owner`: the run that took the
 * workflow last and has neither finished it nor given it back. It fences
 * that run's final write and counts crashes (`lapses`) when another run
 * takes the workflow over (docs/decisions/batch.md, "pg-boss 12").
 *
 * A process of the previous version still running cannot take a workflow
 * any more (its lease query names the dropped column), so old and new
 * processes never start runs of one workflow side by side during a rolling
 * deploy.
 *
 * `batch_pgboss_handoffs` records, per pg-boss schema, that the unfinished
 * workflows found when that schema was first used were queued in it
 * (BatchRuntime: the pg-boss 10 schema's jobs are not carried over).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.dropIndex(['status', 'lease_until']);
    t.dropColumn('lease_until');
    t.renameColumn('lease_owner', 'run_owner');
  });
  await knex.schema.createTable('batch_pgboss_handoffs', (t) => {
    t.text('schema').primary();
    t.integer('workflows').notNullable();
    t.timestamp('handed_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('batch_pgboss_handoffs');
  await knex.schema.alterTable('batch_workflows', (t) => {
    t.renameColumn('run_owner', 'lease_owner');
    t.timestamp('lease_until', { useTz: true });
    t.index(['status', 'lease_until']);
  });
}
