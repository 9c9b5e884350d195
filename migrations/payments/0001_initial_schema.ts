/**
 * The payment service's own database (shared/spec/001, "Resources and their fields"): payments,
 * line items, the audit trail, the customer mirror, plus the engine tables (outbox for
 * `payment.*`, idempotency, job leases) and the crypto watcher's persisted block cursor.
 */
import type { Knex } from 'knex'
import { partialUnique, timestamp, timestamps } from '../shared/columns.js'
import { createEngineTables, dropEngineTables } from '../shared/engine.js'

export const name = '0001_initial_schema'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('customers', (t) => {
    // Equal to the control-plane user id (the payment service holds only a mirror).
    t.uuid('id').primary()
    t.string('wallet_address', 100)
    t.string('email', 320)
    timestamps(t)
  })

  await knex.schema.createTable('payments', (t) => {
    t.uuid('id').primary()
    t.uuid('customer_id').notNullable().references('id').inTable('customers')
    t.string('status', 16).notNullable()
    t.string('method', 16).notNullable()
    t.string('provider', 32).notNullable()
    t.string('provider_reference', 255)
    // Integer minor currency units (spec: pricing).
    t.bigInteger('amount_minor').notNullable()
    t.string('currency', 8).notNullable()
    t.string('idempotency_key', 255).notNullable()
    t.jsonb('subscription_ids').notNullable()
    t.text('return_url').notNullable()
    t.text('cancel_url').notNullable()
    t.text('checkout_url')
    // Crypto details: what the payer must send, and what was seen on chain.
    t.string('crypto_currency', 8)
    t.string('crypto_amount', 80)
    t.string('crypto_receiver_address', 100)
    t.string('crypto_memo', 66)
    t.string('crypto_tx_hash', 66)
    t.bigInteger('crypto_block_number')
    t.text('failure_reason')
    timestamp(t, 'expires_at').notNullable()
    timestamp(t, 'completed_at')
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    t.unique(['customer_id', 'idempotency_key'])
    t.index(['status', 'expires_at'])
  })
  await partialUnique(knex, 'payments_provider_reference_uq', 'payments', ['provider', 'provider_reference'], 'provider_reference IS NOT NULL')
  await partialUnique(knex, 'payments_crypto_memo_uq', 'payments', ['crypto_memo'], 'crypto_memo IS NOT NULL')

  await knex.schema.createTable('payment_line_items', (t) => {
    t.uuid('id').primary()
    t.uuid('payment_id').notNullable().references('id').inTable('payments').onDelete('CASCADE')
    t.integer('position').notNullable()
    t.string('chain_profile_id', 100).notNullable()
    t.string('node_type', 50).notNullable()
    t.string('duration', 8).notNullable()
    t.bigInteger('unit_price_minor').notNullable()
    t.string('currency', 8).notNullable()
    timestamp(t, 'created_at').notNullable()
    t.unique(['payment_id', 'position'])
  })

  await knex.schema.createTable('payment_events', (t) => {
    t.bigIncrements('id').primary()
    t.uuid('payment_id').references('id').inTable('payments').onDelete('CASCADE')
    t.string('actor', 100).notNullable()
    t.string('event_type', 64).notNullable()
    t.string('request_id', 100)
    t.string('ip', 64)
    t.jsonb('details').notNullable()
    timestamp(t, 'created_at').notNullable()
    t.index(['payment_id', 'id'])
  })

  await knex.schema.createTable('quotes', (t) => {
    t.uuid('id').primary()
    t.uuid('customer_id')
    t.jsonb('items').notNullable()
    t.bigInteger('amount_minor').notNullable()
    t.string('currency', 8).notNullable()
    t.jsonb('crypto_amounts').notNullable()
    timestamp(t, 'expires_at').notNullable()
    timestamp(t, 'created_at').notNullable()
  })

  await knex.schema.createTable('crypto_watch_cursors', (t) => {
    t.string('chain', 64).primary()
    t.bigInteger('last_confirmed_block').notNullable()
    t.string('last_confirmed_block_hash', 66)
    timestamp(t, 'updated_at').notNullable()
  })

  await createEngineTables(knex)
}

export async function down(knex: Knex): Promise<void> {
  await dropEngineTables(knex)
  for (const table of ['crypto_watch_cursors', 'quotes', 'payment_events', 'payment_line_items', 'payments', 'customers']) {
    await knex.schema.dropTableIfExists(table)
  }
}
