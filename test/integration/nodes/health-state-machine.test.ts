import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { ConflictError, ValidationError } from '../../../src/errors.js'
import {
  applyHealthUpdate,
  forceNodeState,
  healthEventSubject,
  type HealthChange,
  type HealthEvent,
} from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { NODE_STATES, NODE_TRANSITIONS } from '../../../src/nodes/states.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'

async function healthEvents(db: Db, nodeId: string): Promise<HealthEvent[]> {
  const rows = await db('outbox').where({ subject: healthEventSubject(nodeId) }).orderBy('id')
  return rows.map((r: { payload: unknown }) => fromJson<HealthEvent>(r.payload))
}

describe.each(DIALECTS)('health state machine on %s', (dialect) => {
  let t: TestDatabase
  let db: Db

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterAll(async () => {
    await t.destroy()
  })

  async function nodeIn(state: string, extra: Record<string, unknown> = {}) {
    const node = await insertTestNode(db)
    await setNodeState(db, node.id, state)
    if (Object.keys(extra).length > 0) await db('nodes').where({ id: node.id }).update(extra)
    return node.id
  }

  it('applies exactly the moves of the transition table and rejects every other one', async () => {
    const outcomes: string[] = []
    for (const from of NODE_STATES) {
      for (const to of NODE_STATES) {
        if (from === to) continue
        const nodeId = await nodeIn(from)
        const allowed = NODE_TRANSITIONS[from].includes(to)
        const attempt = db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'upgrade', state: to } }))
        if (allowed) {
          const result = await attempt
          expect(result.changed).toBe(true)
        } else {
          await expect(attempt).rejects.toBeInstanceOf(ConflictError)
        }
        const after = await findNode(db, nodeId)
        const events = await healthEvents(db, nodeId)
        expect(after?.state).toBe(allowed ? to : from)
        expect(after?.version).toBe(allowed ? 2 : 1)
        expect(events).toHaveLength(allowed ? 1 : 0)
        if (allowed) expect(events[0]).toMatchObject({ dimension: 'state', from, to, writer: 'upgrade', forced: false, version: 2 })
        outcomes.push(`${from}->${to}:${allowed ? 'applied' : 'rejected'}`)
      }
    }
    expect(outcomes.filter((o) => o.endsWith('applied'))).toHaveLength(24)
    expect(outcomes).toHaveLength(72)
  })

  it('treats writing the current value as a no-op: no version bump, no event', async () => {
    const nodeId = await nodeIn('healthy')
    const result = await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'heartbeat_evaluation', state: 'healthy' } }))
    expect(result.changed).toBe(false)
    expect((await findNode(db, nodeId))?.version).toBe(1)
    expect(await healthEvents(db, nodeId)).toHaveLength(0)
  })

  it('resets sync_status and application_health to unknown on entering a terminal state', async () => {
    const nodeId = await nodeIn('terminating', { sync_status: 'synced', application_health: 'ok' })
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'termination', state: 'terminated' } }))
    const node = await findNode(db, nodeId)
    expect(node).toMatchObject({ state: 'terminated', sync_status: 'unknown', application_health: 'unknown' })
    const [event] = await healthEvents(db, nodeId)
    expect(event?.current).toEqual({ state: 'terminated', sync_status: 'unknown', application_health: 'unknown', display_state: 'terminated' })
    expect(event?.previous).toMatchObject({ state: 'terminating', sync_status: 'synced', application_health: 'ok' })
  })

  it('lets each writer write only its own dimension', async () => {
    const nodeId = await nodeIn('healthy')
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'policy_evaluation', application_health: 'critical' } }))
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'sync_event', sync_status: 'stalled' } }))
    expect(await findNode(db, nodeId)).toMatchObject({ state: 'healthy', application_health: 'critical', sync_status: 'stalled', version: 3 })
    const events = await healthEvents(db, nodeId)
    expect(events.map((e) => [e.writer, e.dimension, e.to, e.current.display_state])).toEqual([
      ['policy_evaluation', 'application_health', 'critical', 'critical'],
      ['sync_event', 'sync_status', 'stalled', 'critical'],
    ])

    const wrong = [
      { writer: 'policy_evaluation', state: 'down' },
      { writer: 'sync_event', application_health: 'ok' },
      { writer: 'heartbeat_evaluation', sync_status: 'synced' },
      { writer: 'policy_evaluation', application_health: 'fine' },
      { writer: 'somebody', state: 'down' },
      { writer: 'upgrade', state: 'down', sync_status: 'synced' },
    ] as unknown as HealthChange[]
    for (const change of wrong) {
      await expect(db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change }))).rejects.toBeInstanceOf(ValidationError)
    }
    expect((await findNode(db, nodeId))?.version).toBe(3)
  })

  it('refuses health and sync writes on terminal nodes, and evaluation writes on nodes in maintenance', async () => {
    const failed = await nodeIn('failed')
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId: failed, change: { writer: 'sync_event', sync_status: 'synced' } })),
    ).rejects.toBeInstanceOf(ConflictError)

    const maintenance = await nodeIn('maintenance')
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId: maintenance, change: { writer: 'heartbeat_evaluation', state: 'healthy' } })),
    ).rejects.toThrow(/maintenance/)
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId: maintenance, change: { writer: 'policy_evaluation', application_health: 'ok' } })),
    ).rejects.toThrow(/maintenance/)
    // Agents keep reporting sync during an upgrade, and the upgrade itself moves the node on.
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId: maintenance, change: { writer: 'sync_event', sync_status: 'syncing' } }))
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId: maintenance, change: { writer: 'upgrade', state: 'syncing' } }))
    expect(await findNode(db, maintenance)).toMatchObject({ state: 'syncing', sync_status: 'syncing' })
  })

  it('rejects a stale expected version without writing anything', async () => {
    const nodeId = await nodeIn('healthy')
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId, expectedVersion: 7, change: { writer: 'heartbeat_evaluation', state: 'down' } })),
    ).rejects.toBeInstanceOf(ConflictError)
    expect(await findNode(db, nodeId)).toMatchObject({ state: 'healthy', version: 1 })
    expect(await healthEvents(db, nodeId)).toHaveLength(0)
  })

  it('accepts the node as the caller read it, and treats a stale copy as a conflict', async () => {
    const nodeId = await nodeIn('healthy')
    const read = (await findNode(db, nodeId))!
    const first = await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, current: read, change: { writer: 'heartbeat_evaluation', state: 'down' } }))
    expect(first.node).toMatchObject({ state: 'down', version: 2 })
    // The same (now stale) copy again: the row moved on, so nothing is written.
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId, current: read, change: { writer: 'policy_evaluation', application_health: 'critical' } })),
    ).rejects.toBeInstanceOf(ConflictError)
    expect(await findNode(db, nodeId)).toMatchObject({ state: 'down', application_health: 'unknown', version: 2 })
    expect(await healthEvents(db, nodeId)).toHaveLength(1)
    await expect(
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId: crypto.randomUUID(), current: read, change: { writer: 'upgrade', state: 'maintenance' } })),
    ).rejects.toBeInstanceOf(ValidationError)
  })

  it('writes nothing, event included, when the surrounding transaction rolls back', async () => {
    const nodeId = await nodeIn('healthy')
    await expect(
      db.transaction(async (trx) => {
        await applyHealthUpdate(trx, { nodeId, change: { writer: 'heartbeat_evaluation', state: 'down' } })
        throw new Error('later step failed')
      }),
    ).rejects.toThrow('later step failed')
    expect(await findNode(db, nodeId)).toMatchObject({ state: 'healthy', version: 1 })
    expect(await healthEvents(db, nodeId)).toHaveLength(0)
  })

  it('lets exactly one of two concurrent writers win; the other gets a conflict and no event is lost or duplicated', async () => {
    const nodeId = await nodeIn('healthy')
    const a = t.connect()
    const b = t.connect()
    const results = await Promise.allSettled([
      a.transaction((trx) => applyHealthUpdate(trx, { nodeId, expectedVersion: 1, change: { writer: 'heartbeat_evaluation', state: 'down' } })),
      b.transaction((trx) => applyHealthUpdate(trx, { nodeId, expectedVersion: 1, change: { writer: 'upgrade', state: 'maintenance' } })),
    ])
    const won = results.filter((r) => r.status === 'fulfilled')
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    expect(won).toHaveLength(1)
    expect(lost).toHaveLength(1)
    expect(lost[0]?.reason).toBeInstanceOf(ConflictError)
    const node = await findNode(db, nodeId)
    const events = await healthEvents(db, nodeId)
    expect(node?.version).toBe(2)
    expect(events).toHaveLength(1)
    expect(events[0]?.to).toBe(node?.state)
  })

  it('keeps one event per applied change under many concurrent writers that retry on conflict', async () => {
    const nodeId = await nodeIn('healthy')
    const pools = [t.connect(), t.connect(), t.connect()]
    const values = ['ok', 'degraded', 'critical', 'ok', 'degraded', 'critical'] as const
    let applied = 0
    await Promise.all(
      values.map(async (value, i) => {
        const pool = pools[i % pools.length]!
        for (let attempt = 0; attempt < 200; attempt++) {
          try {
            const result = await pool.transaction((trx) =>
              applyHealthUpdate(trx, { nodeId, change: { writer: 'policy_evaluation', application_health: value } }),
            )
            if (result.changed) applied++
            return
          } catch (err) {
            if (!(err instanceof ConflictError)) throw err
          }
        }
        throw new Error('writer never got through')
      }),
    )
    const node = await findNode(db, nodeId)
    const events = await healthEvents(db, nodeId)
    expect(events).toHaveLength(applied)
    expect(node?.version).toBe(1 + applied)
    expect(events.map((e) => e.version)).toEqual(Array.from({ length: applied }, (_, i) => i + 2))
  })

  describe('forced update (compensation)', () => {
    it('skips the table, still emits one event marked forced', async () => {
      const nodeId = await nodeIn('maintenance', { sync_status: 'syncing' })
      const result = await db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'failed', reason: 'migration failed' }))
      expect(result.changed).toBe(true)
      expect(await findNode(db, nodeId)).toMatchObject({ state: 'failed', sync_status: 'unknown', application_health: 'unknown', version: 2 })
      const [event] = await healthEvents(db, nodeId)
      expect(event).toMatchObject({ writer: 'compensation', forced: true, from: 'maintenance', to: 'failed', reason: 'migration failed' })
    })

    it('needs a reason, and never revives a terminal node', async () => {
      const nodeId = await nodeIn('maintenance')
      await expect(db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'degraded', reason: ' ' }))).rejects.toBeInstanceOf(ValidationError)
      const terminated = await nodeIn('terminated')
      await expect(
        db.transaction((trx) => forceNodeState(trx, { nodeId: terminated, state: 'degraded', reason: 'restore' })),
      ).rejects.toBeInstanceOf(ConflictError)
      expect((await findNode(db, terminated))?.state).toBe('terminated')
    })
  })
})
