/**
 * The artifact store's catalogue (docs/artifacts.md): one row per stored binary release, its
 * bytes kept by SHA-256 in the blob store (the data directory, or a bucket), its Ed25519 release
 * signature when it has one. (binary_name, version) names one artifact; two versions may share
 * the same bytes, which are then stored once.
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0011_artifacts'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('artifacts', (t) => {
    t.uuid('id').primary()
    t.string('binary_name', 100).notNullable()
    t.string('version', 64).notNullable()
    // Lowercase hex, without the `sha256:` prefix.
    t.string('sha256', 64).notNullable()
    t.bigInteger('size_bytes').notNullable()
    // base64 of the 64-byte Ed25519 signature over the artifact's statement; null: unsigned.
    t.string('signature', 128)
    // Which release key signed it: the first 16 hex digits of SHA-256 of its public key.
    t.string('key_id', 16)
    timestamp(t, 'created_at').notNullable()
    t.unique(['binary_name', 'version'], { indexName: 'artifacts_binary_version_key' })
    t.index(['sha256'], 'artifacts_sha256_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('artifacts')
}
