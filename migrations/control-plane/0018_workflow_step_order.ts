/**
 * The order a run's steps were first journaled in: the run's version at that write (it grows by
 * one with every journal write). `workflow show` listed steps by start time, then by key, so two
 * steps started within one millisecond came out alphabetically (`configure` before `create-host`).
 * Rows written before this migration keep null and sort as before.
 */
import type { Knex } from 'knex'

export const name = '0018_workflow_step_order'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('workflow_steps', (t) => {
    t.integer('seq')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('workflow_steps', (t) => {
    t.dropColumn('seq')
  })
}
