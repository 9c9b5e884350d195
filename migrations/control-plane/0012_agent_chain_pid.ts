/**
 * The chain process's pid as the node's agent last reported it (issue 22, item 8): operators find
 * the process on the host without walking process groups (`nodeplane node show --wide`). Null
 * when none runs or the agent predates the field. Never in a customer's API response.
 */
import type { Knex } from 'knex'

export const name = '0012_agent_chain_pid'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('agent_status', (t) => {
    t.integer('chain_pid')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('agent_status', (t) => {
    t.dropColumn('chain_pid')
  })
}
