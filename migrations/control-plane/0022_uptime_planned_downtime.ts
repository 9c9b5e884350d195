/**
 * Planned maintenance apart from unplanned downtime (docs/uptime.md, "Planned maintenance"): each
 * hourly bucket also holds the part of its downtime that was a rollout's maintenance. Existing
 * buckets get 0; to have the worker split past hours, mark them `is_complete = false`.
 */
import type { Knex } from 'knex'

export const name = '0022_uptime_planned_downtime'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('uptime_hourly_buckets', (t) => {
    t.integer('planned_downtime_seconds').notNullable().defaultTo(0)
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('uptime_hourly_buckets', (t) => {
    t.dropColumn('planned_downtime_seconds')
  })
}
