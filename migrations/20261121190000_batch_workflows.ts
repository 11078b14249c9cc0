import type { Knex } from 'knex';

/** Batch workflows (interface 2.1–2.5): runs, their steps, webhook delivery attempts. */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('batch_workflows', (t) => {
    t.text('id').primary(); // cf_ + 64 hex
    t.text('request_id').notNullable();
    t.text('owner_id').notNullable();
    t.text('key_id').notNullable();
    t.text('status').notNullable().defaultTo('queued');
    t.jsonb('params').notNullable();
    /** Step outputs as they complete: probe, slice, chunks, aggregate, review, report, result. */
    t.jsonb('output').notNullable().defaultTo('{}');
    t.jsonb('error');
    /** Lease of the process running it; a lapsed lease on a running workflow means that process died. */
    t.text('lease_owner');
    t.timestamp('lease_until', { useTz: true });
    /** pg-boss job of the current run; completed by the sweeper when the run died, so a new one can start. */
    t.text('job_id');
    t.integer('runs').notNullable().defaultTo(0);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('started_at', { useTz: true });
    t.timestamp('ended_at', { useTz: true });
    t.index(['owner_id', 'request_id']);
    t.index(['status', 'lease_until']);
  });
  // At most one unfinished workflow per tenant and request_id: a resubmission while it runs returns it.
  await knex.raw(
    `CREATE UNIQUE INDEX batch_workflows_active_request ON batch_workflows (owner_id, request_id) WHERE status IN ('queued', 'running')`,
  );
  await knex.schema.createTable('batch_steps', (t) => {
    t.text('workflow_id').notNullable().references('batch_workflows.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.integer('seq').notNullable();
    t.text('status').notNullable();
    t.timestamp('started_at', { useTz: true });
    t.timestamp('ended_at', { useTz: true });
    t.integer('attempts').notNullable().defaultTo(0);
    t.text('error');
    t.primary(['workflow_id', 'name']);
  });
  await knex.schema.createTable('batch_webhook_deliveries', (t) => {
    t.bigIncrements('id').primary();
    t.text('workflow_id').notNullable().references('batch_workflows.id').onDelete('CASCADE');
    t.text('message_id').notNullable();
    t.integer('attempt').notNullable();
    t.text('url').notNullable();
    /** delivered | failed | gone (410, no more retries) | abandoned (attempts exhausted) */
    t.text('outcome').notNullable();
    t.integer('status_code');
    t.text('error');
    t.integer('duration_ms').notNullable().defaultTo(0);
    t.timestamp('next_attempt_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['workflow_id', 'attempt']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('batch_webhook_deliveries');
  await knex.schema.dropTableIfExists('batch_steps');
  await knex.schema.dropTableIfExists('batch_workflows');
}
