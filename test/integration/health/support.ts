/** Shared setting for the health evaluation tests: nodes placed in a state at a moved clock. */
import { recordGatewayPresence } from '../../../src/agent-gateway/gateway-presence.js'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import type { HealthEvaluationSettings } from '../../../src/health/evaluator.js'
import { healthEventSubject, type HealthEvent } from '../../../src/nodes/health-state-machine.js'
import { findNode, type NodeRecord } from '../../../src/nodes/node-store.js'
import { createLogger } from '../../../src/log.js'
import { afterEach } from 'vitest'
import { createTestDatabase, type Dialect, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'

export const T0 = Date.parse('2026-06-01T10:00:00.000Z')
export const SECOND = 1_000
export const MINUTE = 60_000
export const HOUR = 3_600_000
export const logger = createLogger({ level: 'silent' })

export const SETTINGS: HealthEvaluationSettings = {
  heartbeatTimeoutMs: 60 * SECOND,
  intervalMs: 15 * SECOND,
  migrationGraceMs: 60 * SECOND,
  migrationCooldownMs: HOUR,
  migrationsPerCycle: 10,
}

export interface NodeSetup {
  state: string
  /** ms relative to T0, or null for none. */
  heartbeatAt?: number | null
  /** ms relative to T0; default 10 minutes before T0. */
  stateSince?: number
  syncStatus?: string
  applicationHealth?: string
  consecutiveFailures?: number
  lastMigrationAt?: number
}

/** A node straight in `setup.state` (test setup only: bypasses the state machine). */
export async function nodeWith(db: Db, setup: NodeSetup): Promise<string> {
  const node = await insertTestNode(db, new Date(T0 - HOUR))
  await db('nodes')
    .where({ id: node.id })
    .update({
      state: setup.state,
      state_changed_at: new Date(T0 + (setup.stateSince ?? -10 * MINUTE)),
      last_heartbeat: setup.heartbeatAt === undefined || setup.heartbeatAt === null ? null : new Date(T0 + setup.heartbeatAt),
      sync_status: setup.syncStatus ?? 'synced',
      application_health: setup.applicationHealth ?? 'ok',
      consecutive_failures: setup.consecutiveFailures ?? 0,
      last_migration_triggered_at: setup.lastMigrationAt === undefined ? null : new Date(T0 + setup.lastMigrationAt),
    })
  return node.id
}

export async function nodeNow(db: Db, id: string): Promise<NodeRecord> {
  const node = await findNode(db, id)
  if (!node) throw new Error(`node ${id} vanished`)
  return node
}

export async function healthEvents(db: Db, nodeId: string): Promise<HealthEvent[]> {
  const rows = (await db('outbox').where({ subject: healthEventSubject(nodeId) }).orderBy('id')) as Array<{ payload: unknown }>
  return rows.map((r) => fromJson<HealthEvent>(r.payload))
}

export const at = (ms: number): Date => new Date(T0 + ms)

/** An agent-gateway receiving heartbeats from a day before T0 to a year after (gateway-presence.ts). */
export async function gatewayPresentThroughout(db: Db): Promise<void> {
  await recordGatewayPresence(db, 'gateway-throughout', new Date(T0 - 24 * HOUR), new Date(T0 + 365 * 24 * HOUR))
}

/**
 * A fresh database per test (call inside a describe): `database()` creates it, destroyed after the
 * test. A gateway is receiving throughout unless `{ gateway: false }`.
 */
export function freshDatabases(dialect: Dialect): { database(options?: { gateway?: boolean }): Promise<Db>; current(): TestDatabase | undefined } {
  let t: TestDatabase | undefined
  afterEach(async () => {
    await t?.destroy()
    t = undefined
  })
  return {
    async database(options = {}) {
      t = await createTestDatabase(dialect)
      if (options.gateway !== false) await gatewayPresentThroughout(t.db)
      return t.db
    },
    current: () => t,
  }
}
