import type { Knex } from 'knex';

/**
 * A key's vocabulary (issue 37): words and their spoken forms that bias the
 * built-in engine on every request of the key, kept with the key so that
 * authentication (cached) brings it along without another query.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('api_keys', (t) => {
    t.jsonb('vocabulary').nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('api_keys', (t) => {
    t.dropColumn('vocabulary');
  });
}
