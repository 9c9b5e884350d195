/**
 * What the providers need beyond 0001: the full crypto instructions on the payment (amount in
 * base units, contract, chain id), the card provider's processed webhook events (a replayed
 * event is recognised and skipped) and the crypto watcher's seen transfers (a log is counted once
 * across restarts and reorgs within the confirmation depth).
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0002_providers'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('payments', (t) => {
    t.string('crypto_amount_base_units', 80)
    t.string('crypto_contract_address', 42)
    t.bigInteger('crypto_chain_id')
  })

  await knex.schema.createTable('provider_events', (t) => {
    t.string('provider', 32).notNullable()
    t.string('event_id', 255).notNullable()
    t.string('event_type', 100).notNullable()
    t.uuid('payment_id')
    timestamp(t, 'processed_at').notNullable()
    t.primary(['provider', 'event_id'])
  })

  await knex.schema.createTable('crypto_transfers', (t) => {
    t.bigIncrements('id').primary()
    t.string('chain', 64).notNullable()
    t.string('tx_hash', 66).notNullable()
    t.integer('log_index').notNullable()
    t.bigInteger('block_number').notNullable()
    t.string('block_hash', 66).notNullable()
    t.string('contract_address', 42).notNullable()
    t.string('currency', 8).notNullable()
    t.string('from_address', 42).notNullable()
    t.string('to_address', 42).notNullable()
    t.string('amount_base_units', 80).notNullable()
    t.string('memo', 66).notNullable()
    t.uuid('payment_id')
    // matched (completed the payment), underpaid, unknown_memo, wrong_receiver, late (payment no longer pending)
    t.string('outcome', 32).notNullable()
    timestamp(t, 'created_at').notNullable()
    t.unique(['chain', 'tx_hash', 'log_index'])
    t.index(['memo'])
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('crypto_transfers')
  await knex.schema.dropTableIfExists('provider_events')
  await knex.schema.alterTable('payments', (t) => {
    t.dropColumn('crypto_chain_id')
    t.dropColumn('crypto_contract_address')
    t.dropColumn('crypto_amount_base_units')
  })
}
