/**
 * The auth-server's shared rate-limit counters (issue 3, "Auth server"): one row per client and
 * fixed one-minute window, incremented with an atomic upsert so every auth-server instance on
 * one database shares the count. Webhook ids already seen go to `idempotency_keys` (0001).
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0002_auth_server'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('auth_rate_limits', (t) => {
    t.string('client_key', 200).notNullable()
    timestamp(t, 'window_start').notNullable()
    t.integer('count').notNullable()
    t.primary(['client_key', 'window_start'])
    // Old windows are purged by time.
    t.index(['window_start'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('auth_rate_limits')
}
