/**
 * Host drains (docs/infrastructure.md, "Drain"): one row per `host drain` that had nodes to move,
 * the progress the `host-drain` workflow writes and `host show` reads. At most one drain of a
 * host runs at a time (a partial unique index); a stopped or cancelled drain keeps its row, and
 * draining again starts a new one that continues where it stopped.
 */
import type { Knex } from 'knex'
import { partialUnique, timestamp } from '../shared/columns.js'

export const name = '0021_host_drains'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('host_drains', (t) => {
    t.uuid('id').primary()
    t.uuid('host_id').notNullable().references('id').inTable('hosts')
    // running | completed | stopped | cancelled
    t.string('status', 16).notNullable()
    // The admin who asked for it: told when it completes or stops.
    t.uuid('requested_by').nullable()
    // The node being moved (or waited for) now, and what the drain is doing about it.
    t.uuid('current_node_id').nullable()
    t.string('activity', 500).nullable()
    t.integer('nodes_moved').notNullable().defaultTo(0)
    // Why a drain stopped (no room elsewhere, a failed migration), and the node it stopped at.
    t.string('stop_reason', 1000).nullable()
    t.uuid('stopped_at_node_id').nullable()
    timestamp(t, 'started_at').notNullable()
    timestamp(t, 'updated_at').notNullable()
    timestamp(t, 'finished_at').nullable()
    t.index(['host_id', 'started_at'], 'host_drains_host_idx')
  })
  await partialUnique(knex, 'host_drains_one_running_uq', 'host_drains', ['host_id'], "status = 'running'")
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('host_drains')
}
