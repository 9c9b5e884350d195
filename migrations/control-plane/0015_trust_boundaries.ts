/**
 * Sign-in and health trust boundaries (issue 16; docs/auth.md, docs/health.md):
 *
 * - `auth_rate_buckets` replaces the fixed one-minute windows of `auth_rate_limits`: one row per
 *   client holding its GCRA "theoretical arrival time" (`tat_ms`, epoch milliseconds, so the
 *   arithmetic is plain on both databases) and whether the last request was admitted, both set by
 *   one atomic upsert shared by every auth-server instance.
 * - `users.disabled_at`: an operator-disabled user; every key and token of theirs is refused.
 * - `auth_nonces.purpose` and `user_id`: wallet registration challenges, bound to the user who
 *   asked, beside the sign-in ones.
 * - `node_sync_changes`: per node, the sync_status changes admitted in the current window, so an
 *   agent flapping its sync status raises one incident instead of an event per flap.
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0015_trust_boundaries'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('auth_rate_buckets', (t) => {
    t.string('client_key', 200).primary()
    t.double('tat_ms').notNullable()
    /** 1 when the request that last wrote the row was admitted, 0 when refused. */
    t.integer('admitted').notNullable()
    t.index(['tat_ms'])
  })
  await knex.schema.dropTable('auth_rate_limits')
  await knex.schema.alterTable('users', (t) => {
    timestamp(t, 'disabled_at')
  })
  await knex.schema.alterTable('auth_nonces', (t) => {
    t.string('purpose', 32).notNullable().defaultTo('sign_in')
    t.uuid('user_id')
  })
  await knex.schema.createTable('node_sync_changes', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes').onDelete('CASCADE')
    timestamp(t, 'window_start').notNullable()
    t.integer('changes').notNullable()
    /** Set when a change was refused in this window (the flapping incident is raised once per window). */
    t.boolean('held').notNullable()
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('node_sync_changes')
  await knex.schema.alterTable('auth_nonces', (t) => {
    t.dropColumn('user_id')
    t.dropColumn('purpose')
  })
  await knex.schema.alterTable('users', (t) => {
    t.dropColumn('disabled_at')
  })
  await knex.schema.createTable('auth_rate_limits', (t) => {
    t.string('client_key', 200).notNullable()
    timestamp(t, 'window_start').notNullable()
    t.integer('count').notNullable()
    t.primary(['client_key', 'window_start'])
    t.index(['window_start'])
  })
  await knex.schema.dropTable('auth_rate_buckets')
}
