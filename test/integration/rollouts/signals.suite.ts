/**
 * The operator's signals on real devnet nodes, on both databases: a breaking migration's canary
 * waiting for approve_canary; pause after the current batch, resume, cancel with in-flight nodes
 * finishing; a full rollback putting every upgraded node back on 1.0.0.
 */
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { retryRolloutNode, signalRollout, startRollout } from '../../../src/rollouts/control.js'
import { listRolloutNodes, requireRollout } from '../../../src/rollouts/store.js'
import type { Dialect } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { tempDir } from '../../helpers/cli.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { ROLLOUT_WORKFLOW } from '../../../src/rollouts/workflow-names.js'
import { findRunByKey } from '../../../src/workflows/index.js'
import { binaryVersions, crashingArtifact, DEVNET_1_1_0, devnetRollout, sha256File, fleetTests, untilStatus } from './harness.js'

/** The suite on the given databases: one file per database keeps each file short (signals.sqlite.test.ts, signals.postgres.test.ts). */
export function rolloutSignalsSuite(dialects: readonly Dialect[]): void {
  describe.each(dialects)('rollout signals on real devnet nodes, %s', (dialect) => {
    // Each test has a database and a fleet of its own, one test after another: three fleets at once starved each other in the full suite (two cores).
    const setUp = fleetTests(dialect)
    const firstBatchInFlight = (db: Db, rolloutId: string) =>
      waitFor(async () => ['in_progress', 'validating', 'succeeded'].includes((await listRolloutNodes(db, rolloutId))[0]?.status ?? 'none') || undefined, 'the first batch to start', 60_000, 20)
    const notifications = async (db: Db, userId: string) => (await db('notifications').where({ user_id: userId }).orderBy('created_at').pluck('kind')) as string[]

    it('a breaking canary upgrades one node, is observed, and waits for approve_canary before the rest', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 3)
      const rollout = await devnetRollout(db, fleet, { strategy: 'canary', canary_size: 1, batch_size: 2, migration_type: 'breaking', health_wait_duration_ms: 2_000 })
      await startRollout(db, rollout.id, { by: fleet.operatorId })

      // Returned as soon as it waits or has stopped running: a rollout that paused instead fails here at once, with its reason.
      const waiting = await waitFor(async () => {
        const r = await requireRollout(db, rollout.id)
        return r.status !== 'running' || r.awaiting === 'approve_canary' ? r : undefined
      }, 'the canary to wait for approval', 120_000, 100)
      expect(waiting).toMatchObject({ status: 'running', awaiting: 'approve_canary', succeeded_nodes: 1, batch_count: 2 })
      const nodes = await listRolloutNodes(db, rollout.id)
      expect(nodes.filter((n) => n.batch_index === 0).map((n) => n.status)).toEqual(['succeeded'])
      expect(nodes.filter((n) => n.batch_index === 1).map((n) => n.status)).toEqual(['pending', 'pending'])
      expect((await binaryVersions(db, fleet.nodes)).sort()).toEqual(['1.0.0', '1.0.0', '1.1.0'])
      // Resume is no approval: refused with what to do instead.
      await expect(signalRollout(db, rollout.id, 'resume', { by: fleet.operatorId })).rejects.toThrow(/cannot resume rollout .*: it is running/)

      await signalRollout(db, rollout.id, 'approve_canary', { by: fleet.operatorId })
      const done = await untilStatus(db, rollout.id, ['completed', 'failed', 'paused'])
      expect(done).toMatchObject({ status: 'completed', succeeded_nodes: 3, awaiting: null })
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0', '1.1.0', '1.1.0'])
      // Approving again is a repeat: nothing sent, nothing changed.
      expect(await signalRollout(db, rollout.id, 'approve_canary', { by: fleet.operatorId })).toMatchObject({ status: 'completed', changed: false })
    })

    it('a breaking canary that fails pauses; resume is not an approval: the rest waits for approve_canary', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 2)
      const dir = tempDir()
      try {
        const crash = crashingArtifact(dir)
        const rollout = await devnetRollout(db, fleet, {
          strategy: 'canary', canary_size: 1, batch_size: 1, migration_type: 'breaking', health_wait_duration_ms: 3_000,
          target_version: '9.9.9-crash', target_binary_url: crash.url, target_binary_checksum: crash.checksum,
        })
        await startRollout(db, rollout.id, { by: fleet.operatorId })
        const paused = await untilStatus(db, rollout.id, ['paused', 'completed', 'failed'])
        expect(paused).toMatchObject({ status: 'paused', pause_reason: 'canary_failed', failed_nodes: 1, awaiting: null })
        await expect(signalRollout(db, rollout.id, 'approve_canary', { by: fleet.operatorId })).rejects.toThrow(/it is paused/)

        await signalRollout(db, rollout.id, 'resume', { by: fleet.operatorId })
        const waiting = await waitFor(async () => {
          const r = await requireRollout(db, rollout.id)
          return r.status === 'running' && r.awaiting === 'approve_canary' ? r : undefined
        }, 'the resumed canary to wait for approval', 60_000, 100)
        expect(waiting.pause_reason).toBeNull()
        expect((await listRolloutNodes(db, rollout.id)).map((n) => [n.batch_index, n.status])).toEqual([[0, 'failed'], [1, 'pending']])

        // Cancel instead of approving: the second node is never touched.
        await signalRollout(db, rollout.id, 'cancel', { by: fleet.operatorId })
        expect(await untilStatus(db, rollout.id, ['cancelled', 'completed', 'failed'])).toMatchObject({ status: 'cancelled', awaiting: null })
        expect((await listRolloutNodes(db, rollout.id)).map((n) => n.status)).toEqual(['failed', 'pending'])
        expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0', '1.0.0'])
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })

    it('pause takes effect after the current batch; resume goes on; cancel lets the batch in flight finish and starts no other', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 3)
      const rollout = await devnetRollout(db, fleet, { batch_size: 1 })
      await startRollout(db, rollout.id, { by: fleet.operatorId })
      await firstBatchInFlight(db, rollout.id)
      await signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })

      const paused = await untilStatus(db, rollout.id, ['paused', 'completed', 'failed'])
      expect(paused).toMatchObject({ status: 'paused', pause_reason: 'operator', succeeded_nodes: 1 })
      expect((await listRolloutNodes(db, rollout.id)).map((n) => n.status)).toEqual(['succeeded', 'pending', 'pending'])
      // A second pause is a repeat (docs/cli.md, "Repeats"): answered as it is, nothing sent.
      expect(await signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })).toMatchObject({ status: 'paused', version: paused.version, changed: false })

      await signalRollout(db, rollout.id, 'resume', { by: fleet.operatorId })
      // Cancel while the second batch is in flight.
      await waitFor(async () => ['in_progress', 'validating', 'succeeded'].includes((await listRolloutNodes(db, rollout.id))[1]?.status ?? 'none') || undefined, 'the second batch to start', 60_000, 20)
      await signalRollout(db, rollout.id, 'cancel', { by: fleet.operatorId })
      const cancelled = await untilStatus(db, rollout.id, ['cancelled', 'completed', 'failed'])
      expect(cancelled).toMatchObject({ status: 'cancelled', succeeded_nodes: 2 })
      expect((await listRolloutNodes(db, rollout.id)).map((n) => n.status)).toEqual(['succeeded', 'succeeded', 'pending'])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(expect.arrayContaining(['1.1.0', '1.1.0', '1.0.0']))
      expect(await notifications(db, fleet.operatorId)).toEqual(['rollout_started', 'rollout_paused'])
    })

    it('rollback puts every upgraded node back on its previous version and ends rolled_back', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 2)
      const rollout = await devnetRollout(db, fleet, { batch_size: 1 })
      await startRollout(db, rollout.id, { by: fleet.operatorId })
      await firstBatchInFlight(db, rollout.id)
      await signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })
      await untilStatus(db, rollout.id, ['paused'])
      expect((await binaryVersions(db, fleet.nodes)).sort()).toEqual(['1.0.0', '1.1.0'])

      await signalRollout(db, rollout.id, 'rollback', { by: fleet.operatorId })
      const rolledBack = await untilStatus(db, rollout.id, ['rolled_back', 'failed', 'completed'])
      expect(rolledBack).toMatchObject({ status: 'rolled_back', succeeded_nodes: 0, error_message: null })
      expect((await listRolloutNodes(db, rollout.id)).map((n) => [n.status, n.upgrade_phase])).toEqual([
        ['rolled_back', 'rolled_back'],
        ['pending', null],
      ])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0', '1.0.0'])
      expect(await notifications(db, fleet.operatorId)).toEqual(['rollout_started', 'rollout_paused', 'rollback_initiated', 'rollback_completed'])
      expect(await signalRollout(db, rollout.id, 'rollback', { by: fleet.operatorId })).toMatchObject({ status: 'rolled_back', changed: false })
    })

    it('a rollback whose previous version fails its health validation ends failed_rollback: node degraded, critical incident', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 2)
      const dir = tempDir()
      try {
        const rollout = await devnetRollout(db, fleet, { batch_size: 1, health_wait_duration_ms: 4_000 })
        await startRollout(db, rollout.id, { by: fleet.operatorId })
        await firstBatchInFlight(db, rollout.id)
        await signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })
        await untilStatus(db, rollout.id, ['paused'])
        const upgraded = (await listRolloutNodes(db, rollout.id)).find((n) => n.status === 'succeeded')
        if (!upgraded) throw new Error('no upgraded node')
        // The release the node goes back to no longer runs (it starts, then crashes).
        const crash = crashingArtifact(dir)
        await db('rollout_nodes').where({ id: upgraded.id }).update({ previous_binary_url: crash.url, previous_checksum: crash.checksum })

        await signalRollout(db, rollout.id, 'rollback', { by: fleet.operatorId })
        const rolledBack = await untilStatus(db, rollout.id, ['rolled_back', 'failed', 'completed'])
        expect(rolledBack.status).toBe('rolled_back')
        const node = (await listRolloutNodes(db, rollout.id)).find((n) => n.id === upgraded.id)
        expect(node).toMatchObject({ status: 'failed', upgrade_phase: 'failed_rollback', error_message: expect.stringMatching(/^rollback to 1\.0\.0: health validation failed: /) })
        expect((await findNode(db, upgraded.node_id))?.state).toBe('degraded')
        const incidents = (await db('incidents').where({ node_id: upgraded.node_id }).select('category', 'severity')) as Array<{ category: string; severity: string }>
        expect(incidents).toEqual([expect.objectContaining({ severity: 'critical' })])
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })

    it('a scheduled rollout cancelled before its time ends at once and never runs; another scheduled waits for its time, then runs', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 1)
      // Cancelled while scheduled (an extension of the spec's table): the chain's slot is free at
      // once, and its workflow, waking at the scheduled time, ends without touching a node.
      const early = new Date(Date.now() + 1_000)
      const cancelledOne = await devnetRollout(db, fleet, { scheduled_at: early })
      await startRollout(db, cancelledOne.id, { by: fleet.operatorId })
      expect(await signalRollout(db, cancelledOne.id, 'cancel', { by: fleet.operatorId })).toMatchObject({ status: 'cancelled', started_at: null })
      expect(await signalRollout(db, cancelledOne.id, 'cancel', { by: fleet.operatorId })).toMatchObject({ status: 'cancelled', changed: false })
      // Its workflow ends, at once or at the scheduled time (whether it first ran before the cancel).
      await waitFor(async () => (await findRunByKey(db, ROLLOUT_WORKFLOW, cancelledOne.id))?.status === 'completed', 'the cancelled rollout workflow to end', 30_000, 100)
      await waitFor(async () => Date.now() > early.getTime() + 500, 'the scheduled time to pass', 10_000, 100)
      expect(await requireRollout(db, cancelledOne.id)).toMatchObject({ status: 'cancelled', started_at: null, succeeded_nodes: 0, failed_nodes: 0 })
      expect((await listRolloutNodes(db, cancelledOne.id)).filter((n) => n.status !== 'pending')).toEqual([])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0'])

      const at = new Date(Date.now() + 1_500)
      const rollout = await devnetRollout(db, fleet, { scheduled_at: at })
      const scheduled = await startRollout(db, rollout.id, { by: fleet.operatorId })
      expect(scheduled).toMatchObject({ status: 'scheduled', started_at: null })
      await expect(signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })).rejects.toThrow(/it is scheduled/)
      const done = await untilStatus(db, rollout.id, ['completed', 'failed'])
      expect(done.status).toBe('completed')
      expect(done.started_at?.getTime()).toBeGreaterThanOrEqual(at.getTime())
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0'])
    })

    it('retry-node: a node whose artifact could not be fetched is retried once it can, and succeeds on its second attempt', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 1)
      const dir = tempDir()
      try {
        const artifact = path.join(dir, 'devnet-node-1.1.0.mjs')
        const rollout = await devnetRollout(db, fleet, { target_binary_url: pathToFileURL(artifact).href, target_binary_checksum: `sha256:${sha256File(DEVNET_1_1_0)}`, failure_threshold: 0 })
        await startRollout(db, rollout.id, { by: fleet.operatorId })
        const paused = await untilStatus(db, rollout.id, ['paused', 'failed', 'completed'])
        expect(paused).toMatchObject({ status: 'paused', pause_reason: 'failure_threshold', failed_nodes: 1 })
        const nodeId = fleet.nodes[0] as string
        await expect(retryRolloutNode(db, rollout.id, '00000000-0000-4000-8000-000000000000', { by: fleet.operatorId })).rejects.toThrow(/not part of rollout/)

        fs.copyFileSync(DEVNET_1_1_0, artifact)
        const retried = await retryRolloutNode(db, rollout.id, nodeId, { by: fleet.operatorId })
        expect(retried).toMatchObject({ status: 'pending', attempt_count: 1, error_message: null })
        await expect(retryRolloutNode(db, rollout.id, nodeId, { by: fleet.operatorId })).rejects.toThrow(/is pending/)
        await signalRollout(db, rollout.id, 'resume', { by: fleet.operatorId })
        const done = await untilStatus(db, rollout.id, ['completed', 'failed'])
        expect(done).toMatchObject({ status: 'completed', succeeded_nodes: 1, failed_nodes: 0 })
        expect((await listRolloutNodes(db, rollout.id))[0]).toMatchObject({ status: 'succeeded', attempt_count: 2 })
        expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0'])
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })
  })
}
