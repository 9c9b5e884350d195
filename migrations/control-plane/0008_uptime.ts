/**
 * Uptime (issue 7): the hourly worker looks up each node's oldest bucket still marked
 * `is_complete = false` once per node and batch; an index on (node_id, bucket_hour) over just
 * those rows answers it with one seek instead of walking the node's 90 days of buckets.
 */
import type { Knex } from 'knex'
import { partialIndex } from '../shared/columns.js'

export const name = '0008_uptime'

export async function up(knex: Knex): Promise<void> {
  await partialIndex(knex, 'uptime_hourly_buckets_incomplete_node_idx', 'uptime_hourly_buckets', ['node_id', 'bucket_hour'], 'is_complete = false')
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP INDEX IF EXISTS uptime_hourly_buckets_incomplete_node_idx')
}
