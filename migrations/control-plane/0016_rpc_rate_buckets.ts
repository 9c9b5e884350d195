/**
 * The rpc-gateway's per-API-key token buckets (docs/rpc-gateway.md, "Limits"), shared by every
 * gateway on one database: `tokens` as of `updated_at_ms` (epoch milliseconds, so the refill is
 * plain arithmetic on both databases).
 */
import type { Knex } from 'knex'

export const name = '0016_rpc_rate_buckets'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('rpc_rate_buckets', (t) => {
    t.string('bucket_key', 100).primary()
    t.double('tokens').notNullable()
    t.bigInteger('updated_at_ms').notNullable()
    t.index(['updated_at_ms'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('rpc_rate_buckets')
}
