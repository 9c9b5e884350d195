/**
 * Placement on the host fleet (docs/infrastructure.md, "Placement"): one row per node placed on a
 * host by the `ssh` provider, holding what it reserves there (cpu, memory, disk, its RPC port).
 * The rows are the reservations: a host's free capacity is its capacity minus the sum of its rows,
 * and a row is written in the same transaction that chooses the host (with the region's ready
 * hosts locked), so two placements never overbook a host. The row goes when the provider removes
 * the node from the host (destroyHost); a deleted node takes its rows with it.
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0019_host_reservations'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('host_reservations', (t) => {
    // The provider's host key (HostSpec.hostKey): creating again with the same key finds this row.
    t.string('host_key', 200).primary()
    t.uuid('host_id').notNullable().references('id').inTable('hosts')
    t.uuid('node_id').notNullable().references('id').inTable('nodes').onDelete('CASCADE')
    // The node's owner and chain, for spreading one user's nodes of a chain across hosts.
    t.uuid('user_id').notNullable()
    t.string('chain_profile_id', 100).notNullable()
    t.string('instance_type', 64).notNullable()
    t.integer('cpu').notNullable()
    t.bigInteger('memory_bytes').notNullable()
    t.bigInteger('disk_bytes').notNullable()
    // The chain's RPC port on the host: each node on a host has its own.
    t.integer('rpc_port').notNullable()
    timestamp(t, 'created_at').notNullable()
    t.unique(['host_id', 'rpc_port'], { indexName: 'host_reservations_port_key' })
    t.index(['node_id'], 'host_reservations_node_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('host_reservations')
}
