/**
 * What callers of a node's endpoint see of the node (docs/health.md, "The endpoint as a health
 * signal"): per node, the calls the rpc-gateways sent to it in the current one-minute window that
 * got an answer and those that timed out or found it unreachable. Gateways add their counts to the
 * same row (an upsert); a newer window replaces an older one. The policy evaluation derives
 * `rpc_upstream_failure_ratio` from it.
 */
import type { Knex } from 'knex'

export const name = '0020_rpc_upstream_health'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('rpc_upstream_health', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes').onDelete('CASCADE')
    t.bigInteger('window_start_ms').notNullable()
    t.bigInteger('answered').notNullable().defaultTo(0)
    t.bigInteger('failed').notNullable().defaultTo(0)
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('rpc_upstream_health')
}
