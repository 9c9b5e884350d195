import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { isConcurrentWriteFailure } from '../../../src/db/errors.js'
import { ConflictError, ValidationError } from '../../../src/errors.js'
import {
  applyHealthUpdate,
  applyHealthChanges,
  forceNodeState,
  healthEventSubject,
  type HealthChange,
  type HealthEvent,
} from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { NODE_STATES, NODE_TRANSITIONS, type NodeState } from '../../../src/nodes/states.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { readStateLog } from '../../../src/uptime/state-log.js'

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

  /**
   * Another writer's pool. On SQLite it stands in for another process but lives in this one: its
   * BEGIN IMMEDIATE waiting for the lock would block the event loop (and so the holder) for the
   * whole busy_timeout, so it gives up after 100 ms with SQLITE_BUSY, which is how it loses there.
   */
  async function contender(): Promise<Db> {
    const pool = t.connect()
    if (dialect === 'sqlite') await pool.raw('PRAGMA busy_timeout = 100')
    return pool
  }

  /** How the losing writer learns it lost: a ConflictError, or on SQLite (above) a busy database. */
  function isConflict(err: unknown): boolean {
    return err instanceof ConflictError || (dialect === 'sqlite' && isConcurrentWriteFailure(err))
  }

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
    const a = await contender()
    const b = await contender()
    const results = await Promise.allSettled([
      a.transaction((trx) => applyHealthUpdate(trx, { nodeId, expectedVersion: 1, change: { writer: 'heartbeat_evaluation', state: 'down' } })),
      b.transaction((trx) => applyHealthUpdate(trx, { nodeId, expectedVersion: 1, change: { writer: 'upgrade', state: 'maintenance' } })),
    ])
    const won = results.filter((r) => r.status === 'fulfilled')
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    expect(won).toHaveLength(1)
    expect(lost).toHaveLength(1)
    expect(isConflict(lost[0]?.reason), String(lost[0]?.reason)).toBe(true)
    const node = await findNode(db, nodeId)
    const events = await healthEvents(db, nodeId)
    expect(node?.version).toBe(2)
    expect(events).toHaveLength(1)
    expect(events[0]?.to).toBe(node?.state)
  })

  it('keeps one event per applied change under many concurrent writers that retry on conflict', async () => {
    const nodeId = await nodeIn('healthy')
    const pools = [await contender(), await contender(), await contender()]
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
            if (!isConflict(err)) throw err
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

  describe('many moves at once (an evaluation cycle)', () => {
    it('writes each allowed move as applyHealthUpdate would: version, state log, one event; refuses the rest without failing them', async () => {
      const ids = [await nodeIn('healthy'), await nodeIn('degraded'), await nodeIn('down'), await nodeIn('healthy'), await nodeIn('provisioning'), await nodeIn('maintenance'), await nodeIn('healthy')]
      const [healthy, degraded, down, stale, provisioning, maintenance, same] = ids as [string, string, string, string, string, string, string]
      const read = new Map(await Promise.all(ids.map(async (id) => [id, (await findNode(db, id))!] as const)))
      // Another writer moves one on after it was read.
      await db.transaction((trx) => applyHealthUpdate(trx, { nodeId: stale, change: { writer: 'upgrade', state: 'maintenance' } }))
      const move = (id: string, state: NodeState, reason: string) => ({ node: read.get(id)!, change: { writer: 'heartbeat_evaluation' as const, state }, reason })
      const moves = [
        move(healthy, 'down', '3 consecutive heartbeat timeouts'),
        move(degraded, 'down', '3 consecutive heartbeat timeouts'),
        move(down, 'healthy', 'heartbeat received while down'),
        move(stale, 'down', 'stale'),
        move(provisioning, 'down', 'not in the table'),
        move(maintenance, 'healthy', 'skipped in maintenance'),
        move(same, 'healthy', 'no change'),
      ]
      const now = new Date()
      const result = await db.transaction((trx) => applyHealthChanges(trx, moves, now))

      expect(result.applied.map((m) => [m.node.id, m.node.state]).sort()).toEqual([[healthy, 'down'], [degraded, 'down'], [down, 'healthy']].sort())
      expect(result.conflicts.map((c) => c.nodeId).sort()).toEqual([stale, provisioning, maintenance].sort())
      expect(result.conflicts.find((c) => c.nodeId === stale)?.message).toMatch(/changed concurrently/)
      expect(result.conflicts.find((c) => c.nodeId === provisioning)?.message).toMatch(/cannot move from provisioning to down/)
      for (const [id, to, from] of [[healthy, 'down', 'healthy'], [degraded, 'down', 'degraded'], [down, 'healthy', 'down']] as const) {
        expect(await findNode(db, id)).toMatchObject({ state: to, version: 2, consecutive_failures: 0, state_changed_at: now })
        const events = await healthEvents(db, id)
        expect(events).toHaveLength(1)
        expect(events[0]).toMatchObject({ writer: 'heartbeat_evaluation', dimension: 'state', from, to, forced: false, version: 2, occurred_at: now.toISOString() })
        const log = await readStateLog(db, id)
        expect(log.at(-1)).toMatchObject({ state: to, entered_at: now, exited_at: null, trigger: expect.stringMatching(/^heartbeat_evaluation: /) })
        expect(log.filter((e) => e.exited_at === null)).toHaveLength(1)
      }
      expect(await findNode(db, stale)).toMatchObject({ state: 'maintenance', version: 2 })
      expect(await healthEvents(db, stale)).toHaveLength(1)
      for (const id of [provisioning, maintenance, same]) {
        expect((await findNode(db, id))?.version).toBe(1)
        expect(await healthEvents(db, id)).toHaveLength(0)
      }
    })

    it('writes application_health changes without touching the state log, and refuses them on terminal nodes and in maintenance', async () => {
      const now = new Date()
      const ids = [await nodeIn('healthy'), await nodeIn('down'), await nodeIn('terminated'), await nodeIn('maintenance')]
      const [healthy, down, terminated, maintenance] = ids as [string, string, string, string]
      const logBefore = new Map(await Promise.all(ids.map(async (id) => [id, (await readStateLog(db, id)).length] as const)))
      const changes = await Promise.all(
        ids.map(async (id, i) => ({ node: (await findNode(db, id))!, change: { writer: 'policy_evaluation' as const, application_health: i % 2 ? ('critical' as const) : ('degraded' as const) }, reason: 'health policy of devnet' })),
      )
      const result = await db.transaction((trx) => applyHealthChanges(trx, changes, now))
      expect(result.applied.map((a) => [a.node.id, a.node.application_health]).sort()).toEqual([[healthy, 'degraded'], [down, 'critical']].sort())
      expect(result.conflicts.map((c) => c.nodeId).sort()).toEqual([terminated, maintenance].sort())
      expect(await findNode(db, down)).toMatchObject({ state: 'down', application_health: 'critical', version: 2 })
      expect(await healthEvents(db, healthy)).toMatchObject([{ writer: 'policy_evaluation', dimension: 'application_health', from: 'unknown', to: 'degraded' }])
      for (const id of ids) expect((await readStateLog(db, id)).length).toBe(logBefore.get(id))
    })

    it('takes one change per node: a second one for the same node in the same call is refused', async () => {
      const nodeId = await nodeIn('healthy')
      const node = (await findNode(db, nodeId))!
      const result = await db.transaction((trx) =>
        applyHealthChanges(
          trx,
          [
            { node, change: { writer: 'heartbeat_evaluation', state: 'down' }, reason: 'first' },
            { node, change: { writer: 'heartbeat_evaluation', state: 'down' }, reason: 'again' },
          ],
          new Date(),
        ),
      )
      expect(result.applied).toHaveLength(1)
      expect(result.conflicts).toEqual([{ nodeId, message: `node ${nodeId} has another change in this batch` }])
      expect(await findNode(db, nodeId)).toMatchObject({ state: 'down', version: 2 })
      expect(await healthEvents(db, nodeId)).toHaveLength(1)
      expect((await readStateLog(db, nodeId)).filter((e) => e.exited_at === null)).toHaveLength(1)
    })

    it('writes nothing when the surrounding transaction rolls back', async () => {
      const nodeId = await nodeIn('healthy')
      const node = (await findNode(db, nodeId))!
      await expect(
        db.transaction(async (trx) => {
          await applyHealthChanges(trx, [{ node, change: { writer: 'heartbeat_evaluation', state: 'down' }, reason: 'x' }], new Date())
          throw new Error('later step failed')
        }),
      ).rejects.toThrow('later step failed')
      expect(await findNode(db, nodeId)).toMatchObject({ state: 'healthy', version: 1 })
      expect(await healthEvents(db, nodeId)).toHaveLength(0)
    })
  })
})
