/**
 * The agent protocol's tables (issue 4, "Agent protocol"): per-node agent tokens (hashed),
 * agent registrations, the latest heartbeat report per node, and agent commands, which travel
 * orchestrator -> database -> gateway -> agent so orchestrators and gateways scale separately.
 */
import type { Knex } from 'knex'
import { partialIndex, timestamp, timestamps } from '../shared/columns.js'

export const name = '0003_agents'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('agent_tokens', (t) => {
    // One token per node: provisioning a node (or a migration's new host) replaces it.
    t.uuid('node_id').primary().references('id').inTable('nodes')
    t.string('token_hash', 64).notNullable()
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'revoked_at')
  })

  await knex.schema.createTable('agent_registrations', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes')
    t.string('agent_version', 64).notNullable()
    t.string('binary_version', 64)
    t.string('hostname', 255).notNullable()
    // X25519 public key (base64) that injected keys are sealed to.
    t.string('public_key', 64).notNullable()
    t.string('gateway_id', 100).notNullable()
    timestamp(t, 'registered_at').notNullable()
    timestamp(t, 'connected_at')
    timestamp(t, 'disconnected_at')
  })

  // The latest heartbeat report per node, written in batches by the gateway.
  await knex.schema.createTable('agent_status', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes')
    timestamp(t, 'reported_at').notNullable()
    t.string('agent_version', 64)
    t.string('binary_version', 64)
    t.string('sync_status', 32).notNullable()
    t.string('process_state', 32).notNullable()
    t.integer('restarts_in_window').notNullable().defaultTo(0)
    t.jsonb('metrics').notNullable()
    t.jsonb('running_command_ids').notNullable()
  })

  await knex.schema.createTable('agent_commands', (t) => {
    t.uuid('id').primary()
    t.uuid('node_id').notNullable().references('id').inTable('nodes')
    t.string('type', 32).notNullable()
    t.jsonb('payload').notNullable()
    // pending -> sent -> running -> completed | failed; cancelled from any unfinished status.
    t.string('status', 16).notNullable()
    // A retried workflow step enqueues its command once.
    t.string('idempotency_key', 200).unique()
    t.string('gateway_id', 100)
    t.string('progress_phase', 64)
    t.string('progress_message', 500)
    t.integer('stall_count').notNullable().defaultTo(0)
    t.boolean('stalled').notNullable().defaultTo(false)
    timestamp(t, 'sent_at')
    timestamp(t, 'acknowledged_at')
    timestamp(t, 'last_progress_at')
    timestamp(t, 'finished_at')
    t.jsonb('result')
    t.text('error')
    timestamps(t)
    t.index(['node_id', 'status'])
  })
  // The gateways' delivery poll reads only unsent commands.
  await partialIndex(knex, 'agent_commands_pending_idx', 'agent_commands', ['created_at'], "status = 'pending'")
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('agent_commands')
  await knex.schema.dropTableIfExists('agent_status')
  await knex.schema.dropTableIfExists('agent_registrations')
  await knex.schema.dropTableIfExists('agent_tokens')
}
