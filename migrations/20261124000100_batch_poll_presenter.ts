import type { Knex } from 'knex';
import { down as dropPollBody, up as pollBodyUp } from './20261121214500_batch_poll_body.js';
import { up as pollOrderUp } from './20261123120000_batch_poll_order.js';

/**
 * The poll response is presented in TypeScript (api/batch/poll.ts) from the
 * workflow row and its steps, read through knex: the ready-made `poll_body`
 * column, the triggers that kept it current and their functions go.
 */
export async function up(knex: Knex): Promise<void> {
  await dropPollBody(knex);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_result_ordered(jsonb)`);
  await knex.raw(`DROP FUNCTION IF EXISTS batch_json_ordered(jsonb, text[])`);
}

/** Back to the triggers as the two earlier migrations left them. */
export async function down(knex: Knex): Promise<void> {
  await pollBodyUp(knex);
  await pollOrderUp(knex);
}
