/**
 * The migration trigger (down past the 60 s grace, 1 hour cooldown, once, capped per cycle) and
 * the maintenance recovery (left in maintenance, held by nothing -> syncing), on both databases.
 * The migrate runs are only started here; the provisioning tests run them.
 */
import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { recoverMaintenance } from '../../../src/health/maintenance-recovery.js'
import { triggerMigrations } from '../../../src/health/migration-trigger.js'
import { MIGRATE_WORKFLOW, migrationKey } from '../../../src/provisioning/migrate.js'
import { requestMigration } from '../../../src/provisioning/triggers.js'
import { findRunByKey } from '../../../src/workflows/index.js'
import { DIALECTS } from '../../helpers/db.js'
import { groupIn } from '../rollouts/helpers.js'
import { at, freshDatabases, healthEvents, HOUR, logger, MINUTE, nodeNow, nodeWith, SECOND } from './support.js'

async function migrateRuns(db: Db, nodeId?: string): Promise<number> {
  const query = db('workflow_runs').where({ workflow_name: MIGRATE_WORKFLOW })
  if (nodeId) query.where('workflow_key', 'like', `${nodeId}:%`)
  const row = (await query.count({ n: '*' }).first()) as { n: number | string }
  return Number(row.n)
}

describe.each(DIALECTS)('migration trigger and maintenance recovery on %s', (dialect) => {
  const { database } = freshDatabases(dialect)
  const trigger = (db: Db, ms: number, maxPerCycle = 10) => triggerMigrations(db, { now: at(ms), graceMs: 60 * SECOND, cooldownMs: HOUR, maxPerCycle, logger })

  it('starts one migration for a node down longer than 60 s, and no second one while it runs', async () => {
    const db = await database()
    const node = await nodeWith(db, { state: 'down', stateSince: -30 * SECOND })
    const healthy = await nodeWith(db, { state: 'healthy', stateSince: -HOUR })

    expect((await trigger(db, 0)).started).toEqual([])
    expect(await migrateRuns(db)).toBe(0)

    const started = await trigger(db, 31 * SECOND)
    expect(started.started.map((s) => s.node_id)).toEqual([node])
    const run = await findRunByKey(db, MIGRATE_WORKFLOW, migrationKey(node, at(31 * SECOND)))
    expect(run).toMatchObject({ status: 'pending', input: { nodeId: node, reason: 'down for more than 60 s' } })
    expect((await nodeNow(db, node)).last_migration_triggered_at?.toISOString()).toBe(at(31 * SECOND).toISOString())

    // Later cycles (and the cooldown passing) while the run is unfinished start nothing new.
    expect((await trigger(db, 46 * SECOND)).started).toEqual([])
    expect((await trigger(db, 2 * HOUR)).started).toEqual([])
    expect(await migrateRuns(db)).toBe(1)
    expect(await migrateRuns(db, healthy)).toBe(0)
  })

  it('keeps the 1 hour cooldown after a finished attempt, then tries again', async () => {
    const db = await database()
    // An attempt 30 minutes ago that failed; the node is down again since 10 minutes.
    const node = await nodeWith(db, { state: 'healthy' })
    await requestMigration(db, node, { reason: 'earlier outage', now: at(-30 * MINUTE) })
    await db('workflow_runs').where({ workflow_name: MIGRATE_WORKFLOW }).update({ status: 'failed' })
    await db('nodes').where({ id: node }).update({ state: 'down', state_changed_at: at(-10 * MINUTE) })

    expect((await trigger(db, 0)).started).toEqual([])
    expect((await trigger(db, 29 * MINUTE)).started).toEqual([])
    expect((await trigger(db, 30 * MINUTE)).started.map((s) => s.node_id)).toEqual([node])
    expect(await migrateRuns(db, node)).toBe(2)
  })

  it('starts at most the cap per cycle, longest outage first, and the rest in later cycles', async () => {
    const db = await database()
    const first = await nodeWith(db, { state: 'down', stateSince: -30 * MINUTE })
    const second = await nodeWith(db, { state: 'down', stateSince: -20 * MINUTE })
    const third = await nodeWith(db, { state: 'down', stateSince: -10 * MINUTE })

    const cycle = await trigger(db, 0, 2)
    expect(cycle.started.map((s) => s.node_id)).toEqual([first, second])
    expect(cycle.deferred).toBe(1)
    const next = await trigger(db, 15 * SECOND, 2)
    expect(next.started.map((s) => s.node_id)).toEqual([third])
    expect(next.deferred).toBe(0)
    expect(await migrateRuns(db)).toBe(3)
  })

  it('recovers a node left in maintenance to syncing, but not one a workflow or unfinished rollout still holds', async () => {
    const db = await database()
    const left = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR, consecutiveFailures: 2 })
    const recent = await nodeWith(db, { state: 'maintenance', stateSince: -10 * MINUTE })
    // A migration still running: its node stays in maintenance however long it takes.
    const migrating = await nodeWith(db, { state: 'healthy', stateSince: -3 * HOUR })
    await requestMigration(db, migrating, { reason: 'operator', now: at(-2 * HOUR) })
    await db('nodes').where({ id: migrating }).update({ state: 'maintenance', state_changed_at: at(-2 * HOUR) })
    const upgrading = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    const abandoned = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    await rolloutHolding(db, upgrading, 'running')
    await rolloutHolding(db, abandoned, 'cancelled')
    // A rollout rolling back is paused (pause_reason rollback) while it moves its nodes back; one
    // paused by its operator lets the batch under way finish: their in-flight nodes stay held.
    const rollingBack = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    const pausedBatch = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    await rolloutHolding(db, rollingBack, 'paused', { pause_reason: 'rollback' })
    await rolloutHolding(db, pausedBatch, 'paused', { pause_reason: 'operator' }, 'validating')
    // A group under rollback_all rolls back the nodes of a component that already completed.
    const groupRollback = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    const group = await groupIn(db, 'running', { failure_policy: 'rollback_all' })
    await rolloutHolding(db, groupRollback, 'completed', { group_id: group.id, component_index: 0 })
    // A node a finished rollout left in flight (its workflow died) is not held by it.
    const finishedLeft = await nodeWith(db, { state: 'maintenance', stateSince: -2 * HOUR })
    await rolloutHolding(db, finishedLeft, 'failed')

    const result = await recoverMaintenance(db, { now: at(0), afterMs: HOUR, logger })
    expect(result.recovered.sort()).toEqual([left, abandoned, finishedLeft].sort())
    expect(result.held).toBe(5)
    expect(await nodeNow(db, left)).toMatchObject({ state: 'syncing', consecutive_failures: 0 })
    expect((await healthEvents(db, left))[0]).toMatchObject({ writer: 'maintenance_recovery', from: 'maintenance', to: 'syncing' })
    for (const id of [recent, migrating, upgrading, rollingBack, pausedBatch, groupRollback]) {
      expect((await nodeNow(db, id)).state).toBe('maintenance')
      expect(await healthEvents(db, id)).toEqual([])
    }
    // Once the migration's run is over, its node is recovered too.
    await db('workflow_runs').where({ workflow_name: MIGRATE_WORKFLOW }).update({ status: 'failed' })
    expect((await recoverMaintenance(db, { now: at(MINUTE), afterMs: HOUR, logger })).recovered).toEqual([migrating])
    // Once the group has ended, the node its rollback left in flight is no longer held.
    await db('rollout_groups').where({ id: group.id }).update({ status: 'rolled_back' })
    expect((await recoverMaintenance(db, { now: at(2 * MINUTE), afterMs: HOUR, logger })).recovered).toEqual([groupRollback])
  })
})

let rollouts = 0
async function rolloutHolding(db: Db, nodeId: string, status: string, fields: Record<string, unknown> = {}, nodeStatus = 'in_progress'): Promise<void> {
  rollouts += 1
  const id = `00000000-0000-4000-8000-${String(rollouts).padStart(12, '0')}`
  const now = at(-2 * HOUR)
  await db('rollouts').insert({
    id,
    chain_profile_id: `chain-${rollouts}`,
    node_type: 'full',
    binary_name: 'devnet-node',
    source_version: '1.0.0',
    target_version: '1.1.0',
    target_binary_url: 'file:///dev/null',
    target_binary_checksum: `sha256:${'0'.repeat(64)}`,
    strategy: 'rolling',
    status,
    batch_size: 1,
    failure_threshold: 0.5,
    health_wait_duration_ms: 60_000,
    created_by: 'test',
    created_at: now,
    updated_at: now,
    ...fields,
  })
  await db('rollout_nodes').insert({ id: crypto.randomUUID(), rollout_id: id, node_id: nodeId, batch_index: 0, status: nodeStatus, created_at: now, updated_at: now })
}
