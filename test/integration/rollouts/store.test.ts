/**
 * The rollout store on both databases: rows round-trip into typed records, lists and their
 * order, the one-active indexes as ConflictErrors, and the status-update functions against the
 * whole rollout and group tables (every from -> to pair) with optimistic locking.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { ConflictError, NotFoundError } from '../../../src/errors.js'
import {
  countRolloutNodes,
  getRollout,
  getRolloutGroup,
  insertRollout,
  insertRolloutGroup,
  insertRolloutNodes,
  listGroupRollouts,
  listRolloutNodes,
  listRollouts,
  pageRolloutNodes,
  updateGroupFields,
  updateGroupStatus,
  updateRolloutFields,
  updateRolloutNode,
  updateRolloutStatus,
} from '../../../src/rollouts/store.js'
import { canMoveGroup, canMoveRollout, ROLLOUT_GROUP_STATUSES, ROLLOUT_STATUSES } from '../../../src/rollouts/states.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { at, groupIn, newGroup, newRollout, rolloutIn, T0 } from './helpers.js'

const open: TestDatabase[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.destroy()))
})

async function fresh(dialect: (typeof DIALECTS)[number]): Promise<Db> {
  const t = await createTestDatabase(dialect)
  open.push(t)
  return t.db
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (err: unknown) => err,
  )
}

const TERMINAL_ROLLOUT = ['completed', 'failed', 'cancelled', 'rolled_back']
const TERMINAL_GROUP = ['completed', 'partial', 'failed', 'cancelled', 'rolled_back']

describe.each(DIALECTS)('rollout store on %s', (dialect) => {
  it('round-trips a rollout with every column typed, and reads unknown or malformed ids as absent', async () => {
    const db = await fresh(dialect)
    const manifest = { description: 'd', recovery_plan: 'restore', config_changes: { config_version: 'v2' }, state_compatibility: { compatible_source_versions: ['1.0.0'] } }
    const inserted = await insertRollout(
      db,
      newRollout({ upgrade_id: 'devnet-1.1.0', manifest, manifest_content_hash: `sha256:${'a'.repeat(64)}`, migration_type: 'breaking', strategy: 'canary', canary_size: 2, failure_threshold: 0.35, reason: 'why', scheduled_at: at(3_600_000) }),
      T0,
    )
    const read = await getRollout(db, inserted.id)
    expect(read).toEqual(inserted)
    expect(read).toMatchObject({
      status: 'pending',
      version: 1,
      manifest,
      migration_type: 'breaking',
      canary_size: 2,
      failure_threshold: 0.35,
      health_wait_duration_ms: 300_000,
      forced: false,
      scheduled_at: at(3_600_000),
      started_at: null,
      completed_at: null,
      pause_reason: null,
      total_nodes: 0,
      created_at: T0,
    })
    expect(await getRollout(db, inserted.id.toUpperCase())).toEqual(inserted)
    expect(await getRollout(db, '00000000-0000-4000-8000-000000000000')).toBeUndefined()
    expect(await getRollout(db, 'not-a-uuid')).toBeUndefined()

    const group = await insertRolloutGroup(db, newGroup({ failure_policy: 'rollback_all', reason: 'g' }), T0)
    expect(await getRolloutGroup(db, group.id)).toEqual(group)
    expect(group).toMatchObject({ status: 'pending', version: 1, current_component_index: null, desired_versions: { 'devnet-node': '1.1.0' } })
    expect(await getRolloutGroup(db, 'nope')).toBeUndefined()
  })

  it('refuses a second active rollout (or group) per chain profile as a ConflictError naming the active one; a finished one does not count', async () => {
    const db = await fresh(dialect)
    const first = await insertRollout(db, newRollout(), T0)
    const err = await rejection(insertRollout(db, newRollout(), T0))
    expect(err).toBeInstanceOf(ConflictError)
    expect((err as ConflictError).message).toBe(`chain devnet already has an active rollout (${first.id}, pending)`)
    await expect(insertRollout(db, newRollout({ chain_profile_id: 'other' }), T0)).resolves.toMatchObject({ status: 'pending' })

    // Inside a caller's transaction the violation does not poison it (savepoint).
    await db.transaction(async (trx) => {
      await expect(insertRollout(trx, newRollout(), T0)).rejects.toBeInstanceOf(ConflictError)
      expect((await getRollout(trx, first.id))?.status).toBe('pending')
    })

    for (const status of ['running', 'completed'] as const) await updateRolloutStatus(db, first.id, status, { now: at(1000) })
    await expect(insertRollout(db, newRollout(), T0)).resolves.toMatchObject({ status: 'pending' })

    const group = await insertRolloutGroup(db, newGroup(), T0)
    const groupErr = await rejection(insertRolloutGroup(db, newGroup(), T0))
    expect(groupErr).toBeInstanceOf(ConflictError)
    expect((groupErr as ConflictError).message).toContain(group.id)
    await updateGroupStatus(db, group.id, 'cancelled', { now: at(1000) })
    await expect(insertRolloutGroup(db, newGroup(), T0)).resolves.toMatchObject({ status: 'pending' })
  })

  it('moves a rollout exactly as the spec table allows: every from -> to pair', async () => {
    const db = await fresh(dialect)
    let allowed = 0
    for (const [i, from] of ROLLOUT_STATUSES.entries()) {
      for (const [j, to] of ROLLOUT_STATUSES.entries()) {
        const rollout = await rolloutIn(db, from, { chain_profile_id: `chain-${i}-${j}` })
        const now = at(60_000)
        if (canMoveRollout(from, to)) {
          allowed++
          const moved = await updateRolloutStatus(db, rollout.id, to, { now, expectedVersion: 1 })
          expect(moved, `${from} -> ${to}`).toEqual(await getRollout(db, rollout.id))
          expect(moved, `${from} -> ${to}`).toMatchObject({ status: to, version: 2, updated_at: now })
          expect(moved.started_at, `${from} -> ${to}`).toEqual(to === 'running' ? now : null)
          expect(moved.completed_at, `${from} -> ${to}`).toEqual(TERMINAL_ROLLOUT.includes(to) ? now : null)
        } else {
          const err = await rejection(updateRolloutStatus(db, rollout.id, to, { now }))
          expect(err, `${from} -> ${to}`).toBeInstanceOf(ConflictError)
          expect((err as ConflictError).message).toBe(`rollout ${rollout.id} is ${from}; it cannot become ${to}`)
          expect(await getRollout(db, rollout.id), `${from} -> ${to} changed the row`).toMatchObject({ status: from, version: 1, updated_at: T0 })
        }
      }
    }
    // The spec's table: 12 moves, one of them from (none); and our two cancels (pending, scheduled).
    expect(allowed).toBe(13)
  })

  it('moves a group exactly as its table allows: every from -> to pair', async () => {
    const db = await fresh(dialect)
    let allowed = 0
    for (const [i, from] of ROLLOUT_GROUP_STATUSES.entries()) {
      for (const [j, to] of ROLLOUT_GROUP_STATUSES.entries()) {
        const group = await groupIn(db, from, { chain_profile_id: `chain-${i}-${j}` })
        const now = at(60_000)
        if (canMoveGroup(from, to)) {
          allowed++
          const moved = await updateGroupStatus(db, group.id, to, { now, expectedVersion: 1 })
          expect(moved, `${from} -> ${to}`).toEqual(await getRolloutGroup(db, group.id))
          expect(moved, `${from} -> ${to}`).toMatchObject({ status: to, version: 2, started_at: to === 'running' ? now : null, completed_at: TERMINAL_GROUP.includes(to) ? now : null })
        } else {
          const err = await rejection(updateGroupStatus(db, group.id, to, { now }))
          expect(err, `${from} -> ${to}`).toBeInstanceOf(ConflictError)
          expect((err as ConflictError).message).toBe(`rollout group ${group.id} is ${from}; it cannot become ${to}`)
          expect(await getRolloutGroup(db, group.id), `${from} -> ${to} changed the row`).toMatchObject({ status: from, version: 1 })
        }
      }
    }
    expect(allowed).toBe(13)
  })

  it('keeps the first started_at across pause and resume, clears pause_reason on resume, and writes the fields given', async () => {
    const db = await fresh(dialect)
    const rollout = await rolloutIn(db, 'pending')
    const running = await updateRolloutStatus(db, rollout.id, 'running', { now: at(1000), fields: { total_nodes: 7, batch_count: 3, current_batch: 0 } })
    expect(running).toMatchObject({ started_at: at(1000), total_nodes: 7, batch_count: 3, current_batch: 0 })
    const paused = await updateRolloutStatus(db, rollout.id, 'paused', { now: at(2000), fields: { pause_reason: 'failure_threshold', error_message: undefined } })
    expect(paused).toMatchObject({ status: 'paused', pause_reason: 'failure_threshold', version: 3, started_at: at(1000) })
    const resumed = await updateRolloutStatus(db, rollout.id, 'running', { now: at(3000), fields: { forced: true } })
    expect(resumed).toMatchObject({ status: 'running', pause_reason: null, forced: true, started_at: at(1000), version: 4 })
    const progressed = await updateRolloutFields(db, rollout.id, { succeeded_nodes: 5, failed_nodes: 1, current_batch: 2, awaiting: 'approve_canary' }, { now: at(4000), expectedVersion: 4 })
    expect(progressed).toMatchObject({ status: 'running', succeeded_nodes: 5, failed_nodes: 1, current_batch: 2, awaiting: 'approve_canary', version: 5 })
    const failed = await updateRolloutStatus(db, rollout.id, 'failed', { now: at(5000), fields: { error_message: 'boom', awaiting: null } })
    expect(failed).toMatchObject({ completed_at: at(5000), error_message: 'boom', awaiting: null, forced: true, succeeded_nodes: 5 })
    expect(await getRollout(db, rollout.id)).toEqual(failed)

    const group = await groupIn(db, 'pending')
    await updateGroupStatus(db, group.id, 'running', { now: at(1000), fields: { current_component_index: 0 } })
    await updateGroupStatus(db, group.id, 'paused', { now: at(2000), fields: { pause_reason: 'component_failed' } })
    const resumedGroup = await updateGroupStatus(db, group.id, 'running', { now: at(3000) })
    expect(resumedGroup).toMatchObject({ started_at: at(1000), pause_reason: null, current_component_index: 0, version: 4 })
    expect(await updateGroupFields(db, group.id, { current_component_index: 1 }, { now: at(4000) })).toMatchObject({ current_component_index: 1, version: 5 })
  })

  it('locks optimistically: a stale expected version, and the loser of two racing writers, get a ConflictError', async () => {
    const db = await fresh(dialect)
    const rollout = await rolloutIn(db, 'running')
    await updateRolloutFields(db, rollout.id, { total_nodes: 3 }, { now: at(1000) })
    const stale = await rejection(updateRolloutStatus(db, rollout.id, 'paused', { now: at(2000), expectedVersion: 1 }))
    expect(stale).toBeInstanceOf(ConflictError)
    expect((stale as ConflictError).message).toBe(`rollout ${rollout.id} was changed concurrently`)
    expect((stale as ConflictError).details).toContain('expected version 1, found 2')
    await expect(updateRolloutFields(db, rollout.id, { total_nodes: 4 }, { now: at(2000), expectedVersion: 1 })).rejects.toBeInstanceOf(ConflictError)

    // Two writers that both read version 2: exactly one wins; the other learns the move is no longer allowed.
    for (let round = 0; round < 5; round++) {
      const r = await rolloutIn(db, 'running', { chain_profile_id: `race-${round}` })
      const results = await Promise.allSettled([
        updateRolloutStatus(db, r.id, 'cancelled', { now: at(3000) }),
        updateRolloutStatus(db, r.id, 'completed', { now: at(3000) }),
      ])
      const won = results.filter((x) => x.status === 'fulfilled')
      const lost = results.filter((x): x is PromiseRejectedResult => x.status === 'rejected')
      expect(won).toHaveLength(1)
      expect(lost).toHaveLength(1)
      expect(lost[0]?.reason).toBeInstanceOf(ConflictError)
      const final = await getRollout(db, r.id)
      expect(final?.version).toBe(2)
      expect(final?.status).toBe((won[0] as PromiseFulfilledResult<{ status: string }>).value.status)
    }

    const group = await groupIn(db, 'running')
    const groupRace = await Promise.allSettled([updateGroupStatus(db, group.id, 'paused', { now: at(1) }), updateGroupStatus(db, group.id, 'paused', { now: at(1) })])
    expect(groupRace.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected'])
    await expect(updateGroupStatus(db, group.id, 'running', { now: at(2), expectedVersion: 1 })).rejects.toBeInstanceOf(ConflictError)

    await expect(updateRolloutStatus(db, '00000000-0000-4000-8000-000000000000', 'running', { now: T0 })).rejects.toBeInstanceOf(NotFoundError)
    await expect(updateGroupStatus(db, 'bad', 'running', { now: T0 })).rejects.toBeInstanceOf(NotFoundError)
  })

  it('lists rollouts newest first with filters and pages; nodes by batch then node; a group\'s rollouts by component', async () => {
    const db = await fresh(dialect)
    const a = await rolloutIn(db, 'completed', { chain_profile_id: 'devnet' }, at(1000))
    const b = await rolloutIn(db, 'pending', { chain_profile_id: 'devnet' }, at(2000))
    const c = await rolloutIn(db, 'running', { chain_profile_id: 'other' }, at(3000))
    const ids = async (filters: Parameters<typeof listRollouts>[1]) => (await listRollouts(db, filters, { limit: 50 })).items.map((r) => r.id)
    expect(await ids({})).toEqual([c.id, b.id, a.id])
    expect(await ids({ chainProfileId: 'devnet' })).toEqual([b.id, a.id])
    expect(await ids({ status: 'running' })).toEqual([c.id])
    expect(await ids({ status: 'running', chainProfileId: 'devnet' })).toEqual([])
    const page1 = await listRollouts(db, {}, { limit: 2 })
    expect(page1.items.map((r) => r.id)).toEqual([c.id, b.id])
    expect(page1.items[0]).toEqual(await getRollout(db, c.id))
    const page2 = await listRollouts(db, {}, { limit: 2, cursor: page1.next_cursor ?? undefined })
    expect(page2).toEqual({ items: [await getRollout(db, a.id)], next_cursor: null })

    const nodeIds = ['00000000-0000-4000-8000-00000000000c', '00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b', '00000000-0000-4000-8000-000000000009']
    await insertRolloutNodes(
      db,
      b.id,
      nodeIds.map((node_id, i) => ({ node_id, batch_index: i < 2 ? 1 : 0, previous_version: '1.0.0' })),
      at(5000),
    )
    const nodes = await listRolloutNodes(db, b.id)
    expect(nodes.map((n) => [n.batch_index, n.node_id])).toEqual([
      [0, nodeIds[3]],
      [0, nodeIds[2]],
      [1, nodeIds[1]],
      [1, nodeIds[0]],
    ])
    expect(nodes[0]).toMatchObject({ rollout_id: b.id, status: 'pending', upgrade_phase: null, attempt_count: 0, previous_version: '1.0.0', created_at: at(5000) })
    const first = await pageRolloutNodes(db, b.id, { limit: 3 })
    expect(first.items).toEqual(nodes.slice(0, 3))
    expect(await pageRolloutNodes(db, b.id, { limit: 3, cursor: first.next_cursor ?? undefined })).toEqual({ items: nodes.slice(3), next_cursor: null })

    const updated = await updateRolloutNode(db, b.id, nodeIds[0] as string, { status: 'failed', upgrade_phase: 'failed_rollback', attempt_count: 2, error_message: 'x' }, at(6000))
    expect(updated).toMatchObject({ status: 'failed', upgrade_phase: 'failed_rollback', attempt_count: 2, error_message: 'x', updated_at: at(6000) })
    await expect(updateRolloutNode(db, a.id, nodeIds[0] as string, { status: 'failed' }, at(6000))).rejects.toBeInstanceOf(NotFoundError)
    expect(await countRolloutNodes(db, b.id)).toEqual({ pending: 3, in_progress: 0, validating: 0, succeeded: 0, failed: 1, rolled_back: 0, skipped: 0 })

    const group = await groupIn(db, 'running', { chain_profile_id: 'grouped' })
    const second = await insertRollout(db, newRollout({ chain_profile_id: 'grouped', group_id: group.id, component_index: 1 }), at(1000))
    await db('rollouts').where({ id: second.id }).update({ status: 'completed' })
    const firstComponent = await insertRollout(db, newRollout({ chain_profile_id: 'grouped', group_id: group.id, component_index: 0 }), at(2000))
    expect((await listGroupRollouts(db, group.id)).map((r) => r.id)).toEqual([firstComponent.id, second.id])
    expect((await listRollouts(db, { groupId: group.id }, { limit: 10 })).items.map((r) => r.id)).toEqual([firstComponent.id, second.id])
  })
})
