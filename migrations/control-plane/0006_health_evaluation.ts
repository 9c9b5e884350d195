/**
 * Health evaluation (issue 7): `nodes.heartbeat_checked_at` records the evaluation cycle that last
 * counted a missed heartbeat, so two evaluators whose cycles overlap (a lease that ran out under
 * a slow cycle) never count one timeout twice; an index for the "in this state since" scans of
 * the migration trigger and the maintenance recovery, and one for the nodes with missed heartbeats.
 */
import type { Knex } from 'knex'
import { partialIndex, timestamp } from '../shared/columns.js'

export const name = '0006_health_evaluation'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('nodes', (t) => {
    timestamp(t, 'heartbeat_checked_at')
    t.index(['state', 'state_changed_at'], 'nodes_state_changed_at_idx')
  })
  // The few nodes missing heartbeats, without a scan of the healthy fleet.
  await partialIndex(knex, 'nodes_failing_idx', 'nodes', ['state'], 'consecutive_failures > 0')
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP INDEX nodes_failing_idx')
  await knex.schema.alterTable('nodes', (t) => {
    t.dropIndex(['state', 'state_changed_at'], 'nodes_state_changed_at_idx')
    t.dropColumn('heartbeat_checked_at')
  })
}
