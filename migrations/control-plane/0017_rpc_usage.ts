/**
 * The rpc-gateway's durable usage (docs/rpc-gateway.md, "Usage"): JSON-RPC calls per hour, node,
 * API key and method, with errors and a latency histogram. Gateways add to a row in batches
 * (an upsert that sums), so several gateways share the same rows. `latency_le_<n>` counts calls
 * answered in at most n ms that fell in no lower bucket; `latency_over` the rest (src/rpc-gateway/usage.ts).
 */
import type { Knex } from 'knex'

export const name = '0017_rpc_usage'

/** Upper bounds (ms) of the latency buckets; the columns are named after them. Never edit: a change is a new migration. */
export const LATENCY_BUCKET_COLUMNS = [
  'latency_le_1',
  'latency_le_2',
  'latency_le_5',
  'latency_le_10',
  'latency_le_25',
  'latency_le_50',
  'latency_le_100',
  'latency_le_250',
  'latency_le_500',
  'latency_le_1000',
  'latency_le_2500',
  'latency_le_10000',
  'latency_over',
] as const

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('rpc_usage', (t) => {
    t.bigInteger('bucket_start_ms').notNullable()
    t.uuid('node_id').notNullable()
    t.uuid('api_key_id').notNullable()
    t.string('method', 64).notNullable()
    t.bigInteger('requests').notNullable().defaultTo(0)
    t.bigInteger('errors').notNullable().defaultTo(0)
    t.double('latency_ms_sum').notNullable().defaultTo(0)
    for (const column of LATENCY_BUCKET_COLUMNS) t.bigInteger(column).notNullable().defaultTo(0)
    t.primary(['node_id', 'bucket_start_ms', 'api_key_id', 'method'])
    t.index(['bucket_start_ms'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('rpc_usage')
}
