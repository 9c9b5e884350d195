/**
 * The control plane's side of payments (issue 6): `payment_requests`, a mirror of each payment a user initiated
 * through the API (the payment service owns the record; this copy answers listings, keeps a
 * retry with the same idempotency_key from initiating twice, and follows payment.* events), and
 * user notifications (payment failed, and later incidents and rollouts).
 */
import type { Knex } from 'knex'
import { timestamp, timestamps } from '../shared/columns.js'

export const name = '0005_payments'

export async function up(knex: Knex): Promise<void> {
  // Not named `payments`: the payment service owns payment records (spec, "Data ownership").
  await knex.schema.createTable('payment_requests', (t) => {
    // The payment service's payment id.
    t.uuid('id').primary()
    t.uuid('user_id').notNullable().references('id').inTable('users')
    t.string('idempotency_key', 255).notNullable()
    t.string('method', 16).notNullable()
    t.string('crypto_currency', 8)
    t.string('status', 16).notNullable()
    t.bigInteger('amount_minor').notNullable()
    t.string('currency', 8).notNullable()
    t.jsonb('subscription_ids').notNullable()
    t.text('failure_reason')
    timestamp(t, 'completed_at')
    timestamps(t)
    t.unique(['user_id', 'idempotency_key'])
    t.index(['user_id', 'created_at', 'id'])
  })

  await knex.schema.createTable('notifications', (t) => {
    t.uuid('id').primary()
    t.uuid('user_id').notNullable()
    // e.g. payment_failed, payment_canceled, subscription_expiring, subscription_terminated
    t.string('kind', 64).notNullable()
    t.string('title', 200).notNullable()
    t.text('body').notNullable()
    t.jsonb('data').notNullable()
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'read_at')
    t.index(['user_id', 'created_at', 'id'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('notifications')
  await knex.schema.dropTableIfExists('payment_requests')
}
