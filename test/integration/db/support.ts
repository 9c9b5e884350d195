/**
 * Helpers for the migration tests: how each driver reports a broken constraint, a dialect-neutral
 * snapshot of the schema, and row builders that fill every NOT NULL column.
 */
import { randomUUID } from 'node:crypto'
import { expect } from 'vitest'
import type { Knex } from 'knex'
import { toJson } from '../../../src/db/dialect.js'
import { dialectOf, type Queryable } from '../../../src/db/knex.js'
import type { DatabaseName } from '../../../src/db/migrate.js'
import { controlPlaneMigrations } from '../../../migrations/control-plane/index.js'
import { paymentsMigrations } from '../../../migrations/payments/index.js'

export const MIGRATIONS: Record<DatabaseName, { names: string[]; tableName: string }> = {
  'control-plane': { names: controlPlaneMigrations.map((m) => m.name), tableName: 'cp_migrations' },
  payments: { names: paymentsMigrations.map((m) => m.name), tableName: 'payments_migrations' },
}

/** The same source migrate.ts gives knex, so knex's own rollback can be driven from a test. */
export function migratorConfig(name: DatabaseName): Knex.MigratorConfig {
  const migrations = name === 'control-plane' ? controlPlaneMigrations : paymentsMigrations
  return {
    tableName: MIGRATIONS[name].tableName,
    migrationSource: {
      getMigrations: async () => [...migrations],
      getMigrationName: (m: (typeof migrations)[number]) => m.name,
      getMigration: async (m: (typeof migrations)[number]) => m,
    },
  }
}

export type Violation = 'unique' | 'foreign_key'

export function violationOf(err: unknown): Violation | 'other' {
  const code = (err as { code?: unknown } | null)?.code
  if (code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') return 'unique'
  if (code === '23503' || code === 'SQLITE_CONSTRAINT_FOREIGNKEY') return 'foreign_key'
  return 'other'
}

/** The write must fail, and fail because of the named kind of constraint (not a typo in the row). */
export async function expectViolation(write: PromiseLike<unknown>, kind: Violation): Promise<void> {
  let failure: unknown
  let failed = false
  try {
    await write
  } catch (err) {
    failed = true
    failure = err
  }
  expect(failed, `expected a ${kind} violation, but the write succeeded`).toBe(true)
  expect(violationOf(failure), `expected a ${kind} violation, got: ${String(failure)}`).toBe(kind)
}

/** Every table, column, index, constraint and sequence, as sorted text lines. */
export async function schemaSnapshot(db: Queryable): Promise<string[]> {
  if (dialectOf(db) === 'sqlite') {
    const rows = (await db.raw(
      "select type, name, tbl_name, sql from sqlite_master where name not like 'sqlite_%' order by type, name",
    )) as Array<{ type: string; name: string; tbl_name: string; sql: string | null }>
    return rows.map((r) => `${r.type} ${r.tbl_name}.${r.name}: ${r.sql ?? ''}`)
  }
  const result = (await db.raw(`
    select 'relation ' || c.relkind::text || ' ' || c.relname as line
      from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public'
    union all
    select 'column ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || case when a.attnotnull then ' not null' else '' end
           || coalesce(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
      from pg_catalog.pg_attribute a
      join pg_catalog.pg_class c on c.oid = a.attrelid
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace
      left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where n.nspname = 'public' and c.relkind = 'r' and a.attnum > 0 and not a.attisdropped
    union all
    select 'index ' || indexname || ': ' || indexdef from pg_catalog.pg_indexes where schemaname = 'public'
    union all
    select 'constraint ' || cl.relname || '.' || co.conname || ': ' || pg_catalog.pg_get_constraintdef(co.oid)
      from pg_catalog.pg_constraint co
      join pg_catalog.pg_class cl on cl.oid = co.conrelid
      join pg_catalog.pg_namespace n on n.oid = co.connamespace
     where n.nspname = 'public'
    order by 1
  `)) as { rows: Array<{ line: string }> }
  return result.rows.map((r) => r.line)
}

export async function tableNames(db: Queryable): Promise<string[]> {
  if (dialectOf(db) === 'sqlite') {
    const rows = (await db.raw(
      "select name from sqlite_master where type = 'table' and name not like 'sqlite_%' order by name",
    )) as Array<{ name: string }>
    return rows.map((r) => r.name)
  }
  const result = (await db.raw(
    "select tablename as name from pg_catalog.pg_tables where schemaname = 'public' order by tablename",
  )) as { rows: Array<{ name: string }> }
  return result.rows.map((r) => r.name)
}

// ---- row builders: every NOT NULL column filled, overridable -----------------------------------

type Row = Record<string, unknown>

async function insert<T extends Row>(db: Queryable, table: string, row: T): Promise<T> {
  await db(table).insert(row)
  return row
}

const stamps = () => ({ created_at: new Date(), updated_at: new Date() })

export function insertUser(db: Queryable, o: Row = {}) {
  return insert(db, 'users', { id: randomUUID(), ...stamps(), ...o })
}

export function insertApiKey(db: Queryable, userId: string, o: Row = {}) {
  return insert(db, 'api_keys', {
    id: randomUUID(),
    user_id: userId,
    name: 'ci',
    key_hash: randomUUID().replace(/-/g, '').padEnd(64, '0'),
    key_prefix: 'np_test',
    scopes: toJson(['nodes:read']),
    ...stamps(),
    ...o,
  })
}

export function insertSubscription(db: Queryable, userId: string, o: Row = {}) {
  return insert(db, 'subscriptions', {
    id: randomUUID(),
    user_id: userId,
    chain_profile_id: 'ethereum-mainnet',
    node_type: 'full',
    duration: '1m',
    provider: 'test',
    region: 'eu-1',
    instance_type: 'small',
    status: 'pending_payment',
    expires_at: new Date(Date.now() + 30 * 24 * 3600_000),
    ...stamps(),
    ...o,
  })
}

export function insertNode(db: Queryable, subscriptionId: string, o: Row = {}) {
  return insert(db, 'nodes', {
    id: randomUUID(),
    subscription_id: subscriptionId,
    chain_profile_id: 'ethereum-mainnet',
    node_type: 'full',
    state: 'provisioning',
    sync_status: 'unknown',
    application_health: 'unknown',
    state_changed_at: new Date(),
    ...stamps(),
    ...o,
  })
}

export function insertIncident(db: Queryable, nodeId: string, o: Row = {}) {
  return insert(db, 'incidents', {
    id: randomUUID(),
    node_id: nodeId,
    subscription_id: randomUUID(),
    chain_profile_id: 'ethereum-mainnet',
    category: 'node_down',
    severity: 'critical',
    status: 'open',
    title: 'Node down',
    description: 'no heartbeat for 3 intervals',
    metadata: toJson({}),
    first_seen_at: new Date(),
    last_seen_at: new Date(),
    ...stamps(),
    ...o,
  })
}

export function insertRolloutGroup(db: Queryable, o: Row = {}) {
  return insert(db, 'rollout_groups', {
    id: randomUUID(),
    chain_profile_id: 'ethereum-mainnet',
    node_type: 'full',
    status: 'pending',
    failure_policy: 'manual',
    component_order: toJson([]),
    desired_versions: toJson({}),
    strategy: 'rolling',
    batch_size: 1,
    failure_threshold: 0.2,
    health_wait_duration_ms: 60_000,
    created_by: 'operator',
    ...stamps(),
    ...o,
  })
}

export function insertRollout(db: Queryable, o: Row = {}) {
  return insert(db, 'rollouts', {
    id: randomUUID(),
    chain_profile_id: 'ethereum-mainnet',
    node_type: 'full',
    binary_name: 'geth',
    source_version: '1.0.0',
    target_version: '1.1.0',
    target_binary_url: 'https://example.invalid/geth-1.1.0.tar.gz',
    target_binary_checksum: `sha256:${'ab'.repeat(32)}`,
    strategy: 'rolling',
    status: 'pending',
    batch_size: 1,
    failure_threshold: 0.2,
    health_wait_duration_ms: 60_000,
    created_by: 'operator',
    ...stamps(),
    ...o,
  })
}

export function insertRolloutNode(db: Queryable, rolloutId: string, nodeId: string, o: Row = {}) {
  return insert(db, 'rollout_nodes', {
    id: randomUUID(),
    rollout_id: rolloutId,
    node_id: nodeId,
    batch_index: 0,
    status: 'pending',
    ...stamps(),
    ...o,
  })
}

export function insertStateLog(db: Queryable, nodeId: string, o: Row = {}) {
  return insert(db, 'uptime_state_log', {
    node_id: nodeId,
    state: 'provisioning',
    entered_at: new Date(),
    trigger: 'test',
    ...o,
  })
}

export function insertWorkflowRun(db: Queryable, o: Row = {}) {
  return insert(db, 'workflow_runs', {
    id: randomUUID(),
    workflow_name: 'provision',
    workflow_key: randomUUID(),
    input: toJson({}),
    status: 'running',
    ...stamps(),
    ...o,
  })
}

export function insertOutbox(db: Queryable, o: Row = {}) {
  return insert(db, 'outbox', {
    message_id: randomUUID(),
    subject: 'payment.completed',
    payload: toJson({}),
    created_at: new Date(),
    ...o,
  })
}

export function insertCustomer(db: Queryable, o: Row = {}) {
  return insert(db, 'customers', { id: randomUUID(), ...stamps(), ...o })
}

export function insertPayment(db: Queryable, customerId: string, o: Row = {}) {
  return insert(db, 'payments', {
    id: randomUUID(),
    customer_id: customerId,
    status: 'pending',
    method: 'crypto',
    provider: 'test',
    amount_minor: 4_900,
    currency: 'USD',
    idempotency_key: randomUUID(),
    subscription_ids: toJson([]),
    return_url: 'https://example.invalid/return',
    cancel_url: 'https://example.invalid/cancel',
    expires_at: new Date(Date.now() + 30 * 60_000),
    ...stamps(),
    ...o,
  })
}

export function insertLineItem(db: Queryable, paymentId: string, o: Row = {}) {
  return insert(db, 'payment_line_items', {
    id: randomUUID(),
    payment_id: paymentId,
    position: 0,
    chain_profile_id: 'ethereum-mainnet',
    node_type: 'full',
    duration: '1m',
    unit_price_minor: 4_900,
    currency: 'USD',
    created_at: new Date(),
    ...o,
  })
}
