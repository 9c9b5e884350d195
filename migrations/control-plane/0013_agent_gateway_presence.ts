/**
 * Which agent-gateways were receiving heartbeats, and when (issue 22, item 1): each gateway
 * process keeps one row, `started_at` when it began to listen and `live_until` pushed forward
 * while it runs. The heartbeat evaluation counts a missed heartbeat only when some gateway was
 * receiving through the whole heartbeat timeout (docs/health.md, "When no gateway was receiving").
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0013_agent_gateway_presence'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('agent_gateway_presence', (t) => {
    t.string('gateway_id', 255).primary()
    timestamp(t, 'started_at').notNullable()
    timestamp(t, 'live_until').notNullable()
    t.index(['live_until'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('agent_gateway_presence')
}
