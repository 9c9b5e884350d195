/**
 * The key hierarchy (spec: "Key hierarchy"; issue 5): a 32-byte data key per node, stored only
 * wrapped by the master key; the node's chain keys encrypted under it (AES-256-GCM); and the
 * server's X25519 key pairs that clients seal secret inputs to (secret half wrapped by the master
 * key, several kept so a rotation does not break inputs sealed to the previous one).
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0004_node_keys'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('node_data_keys', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes')
    // The master key's id and the data key wrapped by it (adapter-specific encoding).
    t.string('master_key_id', 100).notNullable()
    t.text('wrapped_key').notNullable()
    timestamp(t, 'created_at').notNullable()
  })

  await knex.schema.createTable('node_keys', (t) => {
    t.uuid('id').primary()
    t.uuid('node_id').notNullable().references('id').inTable('nodes')
    // The provisioning input (or legacy `keys` entry) this key is for.
    t.string('name', 100).notNullable()
    t.string('key_type', 64).notNullable()
    t.string('source', 32).notNullable()
    t.text('public_key')
    // AES-256-GCM under the node's data key: base64 of iv (12) || tag (16) || ciphertext.
    t.text('ciphertext').notNullable()
    t.boolean('exportable').notNullable().defaultTo(true)
    timestamp(t, 'created_at').notNullable()
    t.unique(['node_id', 'name'])
  })

  await knex.schema.createTable('server_key_pairs', (t) => {
    t.string('id', 64).primary()
    t.string('public_key', 64).notNullable()
    t.string('master_key_id', 100).notNullable()
    t.text('wrapped_secret_key').notNullable()
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'retired_at')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('server_key_pairs')
  await knex.schema.dropTableIfExists('node_keys')
  await knex.schema.dropTableIfExists('node_data_keys')
}
