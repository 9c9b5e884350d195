/**
 * The migrated schema holds what the specs name (000 and 001, "Resources and their fields"),
 * keeps the two services' data apart, enforces foreign keys and keeps timestamps as instants.
 */
import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { toDate } from '../../../src/db/dialect.js'
import type { DatabaseName } from '../../../src/db/migrate.js'
import { createTestDatabase, DIALECTS, type Dialect, type TestDatabase } from '../../helpers/db.js'
import {
  expectViolation,
  insertApiKey,
  insertCustomer,
  insertIncident,
  insertLineItem,
  insertNode,
  insertPayment,
  insertRollout,
  insertRolloutNode,
  insertSubscription,
  insertUser,
  tableNames,
} from './support.js'

/** Outbox, consumer idempotency and job leases: in both databases (ARCHITECTURE.md). */
const ENGINE_COLUMNS: Record<string, string[]> = {
  outbox: ['id', 'message_id', 'subject', 'payload', 'headers', 'created_at', 'published_at'],
  idempotency_keys: ['key', 'consumer', 'processed_at', 'expires_at'],
  job_leases: ['name', 'holder', 'acquired_at', 'expires_at'],
}

/**
 * Field names from the spec's field tables. Where the spec names a duration
 * (`health_wait_duration`, an interval) the column stores it in milliseconds, hence `_ms`.
 */
const CONTROL_PLANE_COLUMNS: Record<string, string[]> = {
  users: ['id', 'wallet_address', 'email', 'wallet_public_key', 'wallet_type', 'external_auth_id'],
  api_keys: ['id', 'user_id', 'name', 'key_hash', 'scopes', 'expires_at', 'revoked_at', 'last_used_at', 'deleted_at'],
  // Single-use, 5 minute lifetime.
  auth_nonces: ['nonce', 'address', 'expires_at', 'used_at'],
  // Stored as a hash, 7 day lifetime, revoked on refresh.
  refresh_tokens: ['id', 'user_id', 'token_hash', 'expires_at', 'revoked_at'],
  subscriptions: [
    'id', 'user_id', 'chain_profile_id', 'node_type', 'duration', 'provider', 'region', 'instance_type',
    'status', 'expires_at', 'grace_period_expires_at', 'payment_id',
  ],
  nodes: [
    'id', 'subscription_id', 'chain_profile_id', 'node_type', 'state', 'sync_status', 'application_health',
    'provider', 'instance_type', 'host_id', 'host_ip', 'region', 'last_heartbeat', 'last_migration_triggered_at',
    // The persisted per-node consecutive-failure counter of the heartbeat evaluation.
    'consecutive_failures',
  ],
  incidents: [
    'id', 'node_id', 'subscription_id', 'user_id', 'chain_profile_id', 'category', 'severity', 'status',
    'title', 'description', 'metadata', 'occurrence_count', 'first_seen_at', 'last_seen_at',
    'acknowledged_at', 'resolved_at', 'is_flapping', 'resolution_debounce',
  ],
  // Per subscription: plaintext text/proof inputs, sealed secrets; marked `applied` after provisioning.
  provisioning_inputs: ['subscription_id', 'name', 'type', 'phase', 'source', 'key_type', 'value', 'sealed_value', 'status'],
  node_config_state: ['node_id', 'binary_version', 'config_version'],
  rollout_groups: [
    'id', 'chain_profile_id', 'node_type', 'status', 'failure_policy', 'component_order', 'desired_versions',
    'strategy', 'batch_size', 'canary_size', 'failure_threshold', 'health_wait_duration_ms', 'created_by',
  ],
  rollouts: [
    'id', 'group_id', 'component_index', 'upgrade_id', 'chain_profile_id', 'node_type', 'binary_name',
    'source_version', 'target_version', 'target_binary_url', 'target_binary_checksum', 'strategy', 'status',
    'batch_size', 'canary_size', 'failure_threshold', 'health_wait_duration_ms', 'total_nodes',
    'succeeded_nodes', 'failed_nodes', 'manifest_content_hash', 'migration_type', 'created_by', 'reason',
    'scheduled_at',
  ],
  rollout_nodes: [
    'id', 'rollout_id', 'node_id', 'batch_index', 'status', 'upgrade_phase', 'previous_version',
    'previous_binary_url', 'previous_checksum', 'error_message', 'attempt_count',
  ],
  uptime_state_log: ['node_id', 'state', 'entered_at', 'exited_at', 'trigger'],
  uptime_hourly_buckets: [
    'node_id', 'bucket_hour', 'uptime_seconds', 'downtime_seconds', 'unknown_seconds', 'total_seconds',
    'is_complete', 'computed_at',
  ],
  workflow_runs: ['id', 'workflow_name', 'workflow_key', 'input', 'status', 'result', 'error'],
  workflow_steps: ['run_id', 'step_key', 'status', 'attempt', 'result'],
  workflow_signals: ['id', 'run_id', 'name', 'payload', 'consumed_at'],
  workflow_timers: ['run_id', 'timer_key', 'fire_at', 'fired_at'],
  ...ENGINE_COLUMNS,
}

const PAYMENTS_COLUMNS: Record<string, string[]> = {
  customers: ['id', 'wallet_address', 'email'],
  payments: [
    'id', 'customer_id', 'status', 'method', 'provider', 'provider_reference', 'amount_minor', 'currency',
    'idempotency_key', 'subscription_ids', 'return_url', 'cancel_url', 'expires_at',
    'crypto_currency', 'crypto_amount', 'crypto_receiver_address', 'crypto_memo', 'crypto_tx_hash',
  ],
  payment_line_items: ['payment_id', 'chain_profile_id', 'node_type', 'duration', 'unit_price_minor', 'currency'],
  payment_events: ['payment_id', 'actor', 'event_type', 'request_id', 'ip', 'details', 'created_at'],
  ...ENGINE_COLUMNS,
}

/** Fields the spec marks nullable (or "when present"): a row without them must be storable. */
const NULLABLE: Record<string, string[]> = {
  users: ['wallet_address', 'email', 'wallet_public_key', 'wallet_type', 'external_auth_id'],
  api_keys: ['expires_at', 'revoked_at', 'last_used_at', 'deleted_at'],
  subscriptions: ['grace_period_expires_at', 'payment_id'],
  incidents: ['user_id', 'acknowledged_at', 'resolved_at'],
  node_config_state: ['binary_version', 'config_version'],
  rollouts: ['group_id'],
  uptime_state_log: ['exited_at'],
}

async function withDatabase(dialect: Dialect, database: DatabaseName, fn: (t: TestDatabase) => Promise<void>): Promise<void> {
  const t = await createTestDatabase(dialect, { database })
  try {
    await fn(t)
  } finally {
    await t.destroy()
  }
}

async function missingColumns(t: TestDatabase, expected: Record<string, string[]>): Promise<Record<string, string[]>> {
  const missing: Record<string, string[]> = {}
  for (const [table, columns] of Object.entries(expected)) {
    const info = await t.db(table).columnInfo()
    const absent = columns.filter((c) => !(c in info))
    if (absent.length > 0) missing[table] = absent
  }
  return missing
}

describe.each(DIALECTS)('schema on %s', (dialect) => {
  it('the control-plane database has every table and field the spec names, and no payment tables', () =>
    withDatabase(dialect, 'control-plane', async (t) => {
      const tables = await tableNames(t.db)
      expect(tables).toEqual(expect.arrayContaining(Object.keys(CONTROL_PLANE_COLUMNS)))
      expect(await missingColumns(t, CONTROL_PLANE_COLUMNS)).toEqual({})
      // The payment service owns payment records in its own database (spec 001, data ownership).
      for (const table of ['payments', 'payment_line_items', 'payment_events', 'customers']) expect(tables).not.toContain(table)
    }))

  it('the payments database has every table and field the spec names, and no control-plane tables', () =>
    withDatabase(dialect, 'payments', async (t) => {
      const tables = await tableNames(t.db)
      expect(tables).toEqual(expect.arrayContaining(Object.keys(PAYMENTS_COLUMNS)))
      expect(await missingColumns(t, PAYMENTS_COLUMNS)).toEqual({})
      for (const table of ['users', 'subscriptions', 'nodes', 'incidents']) expect(tables).not.toContain(table)
    }))

  it('fields the spec marks nullable accept null', () =>
    withDatabase(dialect, 'control-plane', async (t) => {
      const notNullable: string[] = []
      for (const [table, columns] of Object.entries(NULLABLE)) {
        const info = await t.db(table).columnInfo()
        for (const c of columns) if (info[c]?.nullable !== true) notNullable.push(`${table}.${c}`)
      }
      expect(notNullable).toEqual([])
    }))

  it('a timestamp reads back as the same instant, to the millisecond', () =>
    withDatabase(dialect, 'control-plane', async (t) => {
      const user = await insertUser(t.db)
      const expiresAt = new Date('2031-03-04T05:06:07.089Z')
      const sub = await insertSubscription(t.db, user.id, { expires_at: expiresAt })
      const row = (await t.db('subscriptions').where({ id: sub.id }).first()) as { expires_at: unknown }
      expect(toDate(row.expires_at).toISOString()).toBe(expiresAt.toISOString())
      // And the database compares it as an instant, not as text.
      const later = await t.db('subscriptions').where('expires_at', '>', new Date('2031-03-04T05:06:07.088Z')).count({ n: '*' })
      expect(Number(later[0]?.n)).toBe(1)
    }))

  it('enforces foreign keys on the control-plane database', () =>
    withDatabase(dialect, 'control-plane', async (t) => {
      const user = await insertUser(t.db)
      const sub = await insertSubscription(t.db, user.id)

      await expectViolation(insertNode(t.db, randomUUID()), 'foreign_key')
      await expectViolation(insertSubscription(t.db, randomUUID()), 'foreign_key')
      await expectViolation(insertApiKey(t.db, randomUUID()), 'foreign_key')
      await expectViolation(insertRolloutNode(t.db, randomUUID(), randomUUID()), 'foreign_key')
      await expectViolation(insertRollout(t.db, { group_id: randomUUID() }), 'foreign_key')
      // A subscription with a node cannot vanish from under it.
      const node = await insertNode(t.db, sub.id)
      await expectViolation(t.db('subscriptions').where({ id: sub.id }).delete(), 'foreign_key')
      expect(await t.db('nodes').where({ id: node.id }).first()).toBeDefined()
    }))

  it('incidents outlive their node and subscription (no foreign keys, per spec)', () =>
    withDatabase(dialect, 'control-plane', async (t) => {
      const user = await insertUser(t.db)
      const sub = await insertSubscription(t.db, user.id)
      const node = await insertNode(t.db, sub.id)
      const incident = await insertIncident(t.db, node.id, { subscription_id: sub.id })
      await t.db('nodes').where({ id: node.id }).delete()
      await t.db('subscriptions').where({ id: sub.id }).delete()
      expect(await t.db('incidents').where({ id: incident.id }).first()).toMatchObject({ node_id: node.id, subscription_id: sub.id })
    }))

  it('enforces foreign keys on the payments database', () =>
    withDatabase(dialect, 'payments', async (t) => {
      await expectViolation(insertPayment(t.db, randomUUID()), 'foreign_key')
      await expectViolation(insertLineItem(t.db, randomUUID()), 'foreign_key')
      const customer = await insertCustomer(t.db)
      const payment = await insertPayment(t.db, customer.id)
      await insertLineItem(t.db, payment.id)
      await expectViolation(t.db('customers').where({ id: customer.id }).delete(), 'foreign_key')
    }))
})
