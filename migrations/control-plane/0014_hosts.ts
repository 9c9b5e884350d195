/**
 * The host fleet (docs/infrastructure.md, "Hosts"): machines the `ssh` provider places nodes on.
 * A host's SSH private key is never here: it lives in the secrets configuration (the SSH key
 * directory), found by the host's id. The pinned host key fingerprint is OpenSSH's `SHA256:…`.
 * Capacity is what the operator gives the fleet (not measured): cpu in cores, memory and disk in
 * bytes. A removed host keeps its row (nodes' history may name it) but frees its name.
 */
import type { Knex } from 'knex'
import { partialUnique, timestamp, timestamps } from '../shared/columns.js'

export const name = '0014_hosts'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('hosts', (t) => {
    t.uuid('id').primary()
    t.string('name', 63).notNullable()
    t.string('address', 255).notNullable()
    t.integer('port').notNullable()
    t.string('ssh_user', 32).notNullable()
    t.string('region', 64).notNullable()
    // Where the host keeps node directories (each node's agent, chain data, token).
    t.string('root_dir', 255).notNullable()
    t.integer('capacity_cpu').notNullable()
    t.bigInteger('capacity_memory_bytes').notNullable()
    t.bigInteger('capacity_disk_bytes').notNullable()
    t.jsonb('labels').notNullable()
    // ready | cordoned | draining | unreachable | removed (src/hosts/host-states.ts)
    t.string('state', 16).notNullable()
    t.string('host_key_fingerprint', 64).notNullable()
    timestamp(t, 'last_probe_at')
    // ok | unreachable | host_key_mismatch | failed; last_probe_error says what went wrong.
    t.string('last_probe_result', 32)
    t.string('last_probe_error', 500)
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    timestamp(t, 'removed_at')
    t.index(['state', 'region'], 'hosts_state_region_idx')
  })
  await partialUnique(knex, 'hosts_name_key', 'hosts', ['name'], "state <> 'removed'")
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('hosts')
}
