/**
 * Provisioning retries (issue 15, item 7; docs/node-lifecycle.md, "Paid but never provisioned"):
 * one row per active subscription whose node failed to provision, holding the retry budget the
 * periodic job spends and the operator's `subscription reprovision` resets. And an index for
 * "the nodes of a subscription, newest first", which that job and the reprovision ask for.
 */
import type { Knex } from 'knex'
import { timestamp, timestamps } from '../shared/columns.js'

export const name = '0010_provision_retries'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('provision_retries', (t) => {
    t.uuid('subscription_id').primary().references('id').inTable('subscriptions').onDelete('CASCADE')
    // Retries started since the last reset (the provision started by the payment is not one).
    t.integer('attempts').notNullable().defaultTo(0)
    // When the next retry may start; null while a retry runs or before a failure was seen.
    timestamp(t, 'next_attempt_at')
    // The budget ran out: an incident was opened and the user told; only an operator goes on.
    timestamp(t, 'exhausted_at')
    t.uuid('incident_id')
    t.uuid('last_node_id')
    // `user:<id>` of the operator who last reset the budget (subscription reprovision).
    t.string('reset_by', 64)
    timestamp(t, 'reset_at')
    timestamps(t)
  })
  await knex.schema.alterTable('nodes', (t) => {
    t.index(['subscription_id', 'created_at'], 'nodes_subscription_created_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('nodes', (t) => {
    t.dropIndex(['subscription_id', 'created_at'], 'nodes_subscription_created_idx')
  })
  await knex.schema.dropTable('provision_retries')
}
