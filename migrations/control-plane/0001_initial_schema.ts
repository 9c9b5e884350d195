/**
 * The whole control-plane schema of the spec (shared/spec/000, "Resources and their fields"),
 * plus the engine tables. Every "at most one" rule is a unique (partial) index here, so it
 * holds under concurrency on both databases.
 */
import type { Knex } from 'knex'
import { partialIndex, partialUnique, timestamp, timestamps } from '../shared/columns.js'
import { createEngineTables, dropEngineTables } from '../shared/engine.js'

export const name = '0001_initial_schema'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('users', (t) => {
    t.uuid('id').primary()
    t.string('email', 320)
    t.string('wallet_address', 100)
    t.binary('wallet_public_key')
    t.string('wallet_type', 20)
    t.string('external_auth_id', 255)
    t.boolean('is_admin').notNullable().defaultTo(false)
    timestamps(t)
  })
  // Unique when present (spec: User).
  await partialUnique(knex, 'users_email_uq', 'users', ['lower(email)'], 'email IS NOT NULL')
  // Ethereum addresses compare case-insensitively (EIP-55 only changes letter case); Solana
  // base58 addresses are case-sensitive, so two that differ in case are two wallets.
  await partialUnique(
    knex,
    'users_wallet_address_uq',
    'users',
    ["(CASE WHEN wallet_type = 'ethereum' THEN lower(wallet_address) ELSE wallet_address END)"],
    'wallet_address IS NOT NULL',
  )
  await partialUnique(knex, 'users_external_auth_id_uq', 'users', ['external_auth_id'], 'external_auth_id IS NOT NULL')

  await knex.schema.createTable('api_keys', (t) => {
    t.uuid('id').primary()
    t.uuid('user_id').notNullable().references('id').inTable('users').onDelete('CASCADE')
    t.string('name', 100).notNullable()
    t.string('key_hash', 64).notNullable().unique()
    t.string('key_prefix', 20).notNullable()
    t.jsonb('scopes').notNullable()
    t.uuid('rotated_from_id')
    timestamp(t, 'expires_at')
    timestamp(t, 'revoked_at')
    timestamp(t, 'last_used_at')
    timestamp(t, 'deleted_at')
    timestamps(t)
    t.index(['user_id'])
  })

  await knex.schema.createTable('auth_nonces', (t) => {
    t.string('nonce', 64).primary()
    t.string('address', 100).notNullable()
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'expires_at').notNullable().index()
    timestamp(t, 'used_at')
  })

  await knex.schema.createTable('refresh_tokens', (t) => {
    t.uuid('id').primary()
    t.uuid('user_id').notNullable().references('id').inTable('users').onDelete('CASCADE')
    t.string('token_hash', 64).notNullable().unique()
    t.uuid('replaced_by_id')
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'expires_at').notNullable()
    timestamp(t, 'revoked_at')
    t.index(['user_id'])
  })

  await knex.schema.createTable('subscriptions', (t) => {
    t.uuid('id').primary()
    t.uuid('user_id').notNullable().references('id').inTable('users')
    t.string('chain_profile_id', 100).notNullable()
    t.string('node_type', 50).notNullable()
    t.string('duration', 8).notNullable()
    t.string('provider', 100).notNullable()
    t.string('region', 100).notNullable()
    t.string('instance_type', 100).notNullable()
    t.string('status', 32).notNullable()
    timestamp(t, 'expires_at').notNullable()
    timestamp(t, 'grace_period_expires_at')
    t.string('payment_id', 100)
    timestamp(t, 'activated_at')
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    t.index(['user_id', 'status'])
    t.index(['status', 'expires_at'])
    t.index(['payment_id'])
  })
  // Rule 1 of POST /subscriptions, enforced so two identical concurrent requests create one.
  await partialUnique(knex, 'subscriptions_one_pending_uq', 'subscriptions', ['user_id', 'chain_profile_id', 'node_type', 'duration'], "status = 'pending_payment'")

  await knex.schema.createTable('nodes', (t) => {
    t.uuid('id').primary()
    t.uuid('subscription_id').notNullable().references('id').inTable('subscriptions')
    t.string('chain_profile_id', 100).notNullable()
    t.string('node_type', 50).notNullable()
    t.string('state', 32).notNullable()
    t.string('sync_status', 32).notNullable()
    t.string('application_health', 32).notNullable()
    t.string('provider', 100)
    t.string('instance_type', 100)
    t.string('host_id', 255)
    t.string('host_ip', 64)
    t.string('region', 100)
    timestamp(t, 'last_heartbeat')
    timestamp(t, 'last_migration_triggered_at')
    // Heartbeat evaluation's persisted consecutive-failure counter (spec: 3 before `down`).
    t.integer('consecutive_failures').notNullable().defaultTo(0)
    timestamp(t, 'state_changed_at').notNullable()
    // Optimistic lock for the health state machine.
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    t.index(['chain_profile_id', 'node_type', 'state'])
    t.index(['state', 'last_heartbeat'])
  })
  // One live node per subscription; a failed or terminated one may be replaced.
  await partialUnique(knex, 'nodes_one_live_per_subscription_uq', 'nodes', ['subscription_id'], "state NOT IN ('terminated', 'failed')")

  await knex.schema.createTable('incidents', (t) => {
    t.uuid('id').primary()
    // No foreign keys: incidents survive deletion of their node or subscription (spec).
    t.uuid('node_id').notNullable()
    t.uuid('subscription_id').notNullable()
    t.uuid('user_id')
    t.string('chain_profile_id', 100).notNullable()
    t.string('category', 32).notNullable()
    t.string('severity', 16).notNullable()
    t.string('status', 16).notNullable()
    t.string('title', 255).notNullable()
    t.text('description').notNullable()
    t.jsonb('metadata').notNullable()
    t.integer('occurrence_count').notNullable().defaultTo(1)
    timestamp(t, 'first_seen_at').notNullable()
    timestamp(t, 'last_seen_at').notNullable()
    timestamp(t, 'acknowledged_at')
    timestamp(t, 'resolved_at')
    t.boolean('is_flapping').notNullable().defaultTo(false)
    t.integer('resolution_debounce').notNullable().defaultTo(0)
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    t.index(['user_id', 'status'])
    t.index(['node_id'])
  })
  // Dedup rule: one unresolved incident per (node, category).
  await partialUnique(knex, 'incidents_one_open_per_node_category_uq', 'incidents', ['node_id', 'category'], "status IN ('open', 'acknowledged')")

  await knex.schema.createTable('provisioning_inputs', (t) => {
    t.uuid('id').primary()
    t.uuid('subscription_id').notNullable().references('id').inTable('subscriptions').onDelete('CASCADE')
    t.string('name', 100).notNullable()
    t.string('type', 16).notNullable()
    t.string('phase', 32).notNullable()
    t.string('source', 32)
    t.string('key_type', 64)
    // text and proof inputs: plaintext; secret user_provided inputs: the sealed box as received.
    t.text('value')
    t.binary('sealed_value')
    t.string('status', 16).notNullable()
    timestamp(t, 'applied_at')
    timestamps(t)
    t.unique(['subscription_id', 'name'])
  })

  await knex.schema.createTable('node_config_state', (t) => {
    t.uuid('node_id').primary().references('id').inTable('nodes').onDelete('CASCADE')
    t.string('binary_version', 100)
    t.string('config_version', 100)
    timestamp(t, 'updated_at').notNullable()
  })

  await knex.schema.createTable('rollout_groups', (t) => {
    t.uuid('id').primary()
    t.string('chain_profile_id', 100).notNullable()
    t.string('node_type', 50).notNullable()
    t.string('status', 16).notNullable()
    t.string('failure_policy', 16).notNullable()
    t.jsonb('component_order').notNullable()
    t.jsonb('desired_versions').notNullable()
    t.string('strategy', 16).notNullable()
    t.integer('batch_size').notNullable()
    t.integer('canary_size')
    t.double('failure_threshold').notNullable()
    t.bigInteger('health_wait_duration_ms').notNullable()
    t.integer('current_component_index')
    t.string('created_by', 255).notNullable()
    t.text('reason')
    timestamp(t, 'started_at')
    timestamp(t, 'completed_at')
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
  })
  await partialUnique(knex, 'rollout_groups_one_active_per_chain_uq', 'rollout_groups', ['chain_profile_id'], "status IN ('pending', 'running', 'paused')")

  await knex.schema.createTable('rollouts', (t) => {
    t.uuid('id').primary()
    t.uuid('group_id').references('id').inTable('rollout_groups')
    t.integer('component_index')
    t.string('upgrade_id', 200)
    t.string('chain_profile_id', 100).notNullable()
    t.string('node_type', 50).notNullable()
    t.string('binary_name', 100).notNullable()
    t.string('source_version', 100).notNullable()
    t.string('target_version', 100).notNullable()
    t.text('target_binary_url').notNullable()
    t.string('target_binary_checksum', 80).notNullable()
    t.string('strategy', 16).notNullable()
    t.string('status', 16).notNullable()
    t.integer('batch_size').notNullable()
    t.integer('canary_size')
    t.double('failure_threshold').notNullable()
    t.bigInteger('health_wait_duration_ms').notNullable()
    t.integer('total_nodes').notNullable().defaultTo(0)
    t.integer('succeeded_nodes').notNullable().defaultTo(0)
    t.integer('failed_nodes').notNullable().defaultTo(0)
    t.string('manifest_content_hash', 80)
    t.string('migration_type', 32)
    // Manifest fields beyond the columns: recovery_plan, config_changes, state compatibility.
    t.jsonb('manifest')
    t.string('created_by', 255).notNullable()
    t.text('reason')
    timestamp(t, 'scheduled_at')
    timestamp(t, 'started_at')
    timestamp(t, 'completed_at')
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    t.index(['group_id', 'component_index'])
  })
  await partialUnique(knex, 'rollouts_one_active_per_chain_uq', 'rollouts', ['chain_profile_id'], "status IN ('pending', 'scheduled', 'running', 'paused')")

  await knex.schema.createTable('rollout_nodes', (t) => {
    t.uuid('id').primary()
    t.uuid('rollout_id').notNullable().references('id').inTable('rollouts').onDelete('CASCADE')
    t.uuid('node_id').notNullable()
    t.integer('batch_index').notNullable()
    t.string('status', 16).notNullable()
    t.string('upgrade_phase', 16)
    t.string('previous_version', 100)
    t.text('previous_binary_url')
    t.string('previous_checksum', 80)
    t.text('error_message')
    t.integer('attempt_count').notNullable().defaultTo(0)
    timestamp(t, 'started_at')
    timestamp(t, 'completed_at')
    timestamps(t)
    t.unique(['rollout_id', 'node_id'])
    t.index(['rollout_id', 'batch_index'])
  })

  await knex.schema.createTable('uptime_state_log', (t) => {
    t.bigIncrements('id').primary()
    t.uuid('node_id').notNullable()
    t.string('state', 32).notNullable()
    timestamp(t, 'entered_at').notNullable()
    timestamp(t, 'exited_at')
    t.string('trigger', 64).notNullable()
    t.index(['node_id', 'entered_at'])
  })
  // Append-only log with exactly one open interval per node.
  await partialUnique(knex, 'uptime_state_log_one_open_uq', 'uptime_state_log', ['node_id'], 'exited_at IS NULL')

  await knex.schema.createTable('uptime_hourly_buckets', (t) => {
    t.uuid('node_id').notNullable()
    timestamp(t, 'bucket_hour').notNullable()
    t.integer('uptime_seconds').notNullable()
    t.integer('downtime_seconds').notNullable()
    t.integer('unknown_seconds').notNullable()
    t.integer('total_seconds').notNullable()
    t.boolean('is_complete').notNullable()
    timestamp(t, 'computed_at').notNullable()
    t.primary(['node_id', 'bucket_hour'])
    t.index(['bucket_hour'])
  })
  await partialIndex(knex, 'uptime_hourly_buckets_incomplete_idx', 'uptime_hourly_buckets', ['bucket_hour'], 'is_complete = false')

  await knex.schema.createTable('workflow_runs', (t) => {
    t.uuid('id').primary()
    t.string('workflow_name', 100).notNullable()
    // The idempotency key: a second start with the same (name, key) returns this run.
    t.string('workflow_key', 255).notNullable()
    t.jsonb('input').notNullable()
    t.string('status', 16).notNullable()
    t.jsonb('result')
    t.text('error')
    t.string('current_step', 200)
    t.string('lease_owner', 200)
    timestamp(t, 'lease_expires_at')
    // When a sleeping run (timer or signal wait) becomes runnable again.
    timestamp(t, 'wake_at')
    t.integer('version').notNullable().defaultTo(1)
    timestamps(t)
    timestamp(t, 'completed_at')
    t.unique(['workflow_name', 'workflow_key'])
    t.index(['status', 'wake_at'])
  })

  await knex.schema.createTable('workflow_steps', (t) => {
    t.uuid('run_id').notNullable().references('id').inTable('workflow_runs').onDelete('CASCADE')
    t.string('step_key', 200).notNullable()
    t.string('status', 16).notNullable()
    t.integer('attempt').notNullable().defaultTo(0)
    t.jsonb('result')
    t.text('error')
    timestamp(t, 'started_at')
    timestamp(t, 'heartbeat_at')
    timestamp(t, 'timeout_at')
    timestamp(t, 'next_attempt_at')
    timestamp(t, 'finished_at')
    t.primary(['run_id', 'step_key'])
  })

  await knex.schema.createTable('workflow_signals', (t) => {
    t.uuid('id').primary()
    t.uuid('run_id').notNullable().references('id').inTable('workflow_runs').onDelete('CASCADE')
    t.string('name', 100).notNullable()
    t.jsonb('payload')
    timestamp(t, 'created_at').notNullable()
    timestamp(t, 'consumed_at')
    t.index(['run_id', 'name', 'consumed_at'])
  })

  await knex.schema.createTable('workflow_timers', (t) => {
    t.uuid('run_id').notNullable().references('id').inTable('workflow_runs').onDelete('CASCADE')
    t.string('timer_key', 200).notNullable()
    timestamp(t, 'fire_at').notNullable()
    timestamp(t, 'fired_at')
    t.primary(['run_id', 'timer_key'])
    t.index(['fire_at'])
  })

  await createEngineTables(knex)
}

export async function down(knex: Knex): Promise<void> {
  await dropEngineTables(knex)
  for (const table of [
    'workflow_timers',
    'workflow_signals',
    'workflow_steps',
    'workflow_runs',
    'uptime_hourly_buckets',
    'uptime_state_log',
    'rollout_nodes',
    'rollouts',
    'rollout_groups',
    'node_config_state',
    'provisioning_inputs',
    'incidents',
    'nodes',
    'subscriptions',
    'refresh_tokens',
    'auth_nonces',
    'api_keys',
    'users',
  ]) {
    await knex.schema.dropTableIfExists(table)
  }
}
