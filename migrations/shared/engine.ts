/**
 * Engine tables every database of ours carries: the transactional outbox, the consumer
 * idempotency store and job leases. Frozen with the migration that first used it.
 */
import type { Knex } from 'knex'
import { partialIndex, timestamp } from './columns.js'

export async function createEngineTables(knex: Knex): Promise<void> {
  await knex.schema.createTable('outbox', (t) => {
    // A monotonic sequence gives the relay a publication order.
    t.bigIncrements('id').primary()
    t.uuid('message_id').notNullable().unique()
    t.string('subject', 255).notNullable()
    t.jsonb('payload').notNullable()
    t.jsonb('headers')
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'published_at')
    t.string('claimed_by', 100)
    timestamp(t, 'claimed_until')
    t.integer('attempts').notNullable().defaultTo(0)
    t.text('last_error')
  })
  await partialIndex(knex, 'outbox_unpublished_idx', 'outbox', ['id'], 'published_at IS NULL')

  await knex.schema.createTable('idempotency_keys', (t) => {
    t.string('key', 300).primary()
    t.string('consumer', 100).notNullable()
    timestamp(t, 'processed_at').notNullable()
    timestamp(t, 'expires_at').notNullable().index()
  })

  await knex.schema.createTable('job_leases', (t) => {
    t.string('name', 200).primary()
    t.string('holder', 200).notNullable()
    timestamp(t, 'acquired_at').notNullable()
    timestamp(t, 'expires_at').notNullable()
  })
}

export async function dropEngineTables(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('job_leases')
  await knex.schema.dropTableIfExists('idempotency_keys')
  await knex.schema.dropTableIfExists('outbox')
}
