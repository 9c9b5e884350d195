/**
 * Rollouts on real devnet nodes (local provider, real agent processes), on both databases: a
 * rolling upgrade from 1.0.0 to 1.1.0 with the binary really replaced and the version reported
 * back; a bad checksum failing every node with the threshold auto-pause and `force`; an artifact
 * that crashes after it starts, undone node by node.
 */
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { signalRollout, startRollout } from '../../../src/rollouts/control.js'
import { createRollout } from '../../../src/rollouts/create.js'
import { listRolloutNodes, requireRollout } from '../../../src/rollouts/store.js'
import type { Dialect } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { binaryVersions, crashingArtifact, DEVNET_1_1_0, devnetRollout, eventPayloads, eventSubjects, reportedVersions, sha256File, fleetTests, untilStatus } from './harness.js'

/** writer:state of each state move of the node's health events, in order. */
async function stateMoves(db: Db, nodeId: string): Promise<string[]> {
  const events = await eventPayloads<{ dimension: string; writer: string; to: string }>(db, `events.node.${nodeId}.health_changed`)
  return events.filter((e) => e.dimension === 'state').map((e) => `${e.writer}:${e.to}`)
}

/** The suite on the given databases: one file per database keeps each file short (rolling.sqlite.test.ts, rolling.postgres.test.ts). */
export function rollingRolloutsSuite(dialects: readonly Dialect[]): void {
  describe.each(dialects)('rollouts on real devnet nodes, %s', (dialect) => {
    // Each test has a database and a fleet of its own, one test after another: three fleets at once starved each other in the full suite (two cores).
    const setUp = fleetTests(dialect)

    it('upgrades the fleet batch by batch: binary replaced, checksum verified, version reported back, events and counters', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 3)
      const rollout = await devnetRollout(db, fleet, { batch_size: 2 })
      const started = await startRollout(db, rollout.id, { by: fleet.operatorId })
      expect(started.status).toBe('running')

      const done = await untilStatus(db, rollout.id, ['completed', 'failed', 'paused'])
      expect(done, JSON.stringify(await listRolloutNodes(db, rollout.id))).toMatchObject({ status: 'completed', total_nodes: 3, succeeded_nodes: 3, failed_nodes: 0, batch_count: 2 })
      const nodes = await listRolloutNodes(db, rollout.id)
      expect(nodes.map((n) => [n.batch_index, n.status, n.upgrade_phase, n.attempt_count, n.previous_version])).toEqual([
        [0, 'succeeded', 'completed', 1, '1.0.0'],
        [0, 'succeeded', 'completed', 1, '1.0.0'],
        [1, 'succeeded', 'completed', 1, '1.0.0'],
      ])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0', '1.1.0', '1.1.0'])
      // The agents run and report the new release: its file is installed on each host.
      await waitFor(async () => (await reportedVersions(db, fleet.nodes)).every((v) => v === '1.1.0'), 'the agents to report 1.1.0', 30_000, 200)
      for (const id of fleet.nodes) {
        expect(fs.existsSync(path.join(fleet.setting.root, `local-${id}`, 'state', 'releases', '1.1.0', 'devnet-node'))).toBe(true)
        // Back from maintenance through syncing (the heartbeat evaluation may have found it healthy since).
        expect(['syncing', 'healthy']).toContain((await findNode(db, id))?.state)
        expect(await stateMoves(db, id)).toEqual(expect.arrayContaining(['upgrade:maintenance', 'upgrade:syncing']))
      }

      const subjects = await eventSubjects(db, `events.rollout.${rollout.id}.`)
      expect(subjects[0]).toBe(`events.rollout.${rollout.id}.started`)
      expect(subjects.at(-1)).toBe(`events.rollout.${rollout.id}.completed`)
      expect(subjects.filter((s) => s.endsWith('.progress')).length).toBeGreaterThanOrEqual(2)
      const nodeId = fleet.nodes[0] as string
      const phases = await eventPayloads<{ upgrade_phase: string }>(db, `events.node.${nodeId}.upgrade_phase_changed`)
      // The phases seen while polling the agent's progress (a local upgrade is quicker than a
      // poll, so some pass unseen), in the executor's order, then verifying by the control plane.
      const order = ['preparing', 'stopped', 'mutating', 'starting', 'verifying']
      const seen = phases.map((p) => p.upgrade_phase)
      expect(seen.at(-1)).toBe('verifying')
      expect(seen).toEqual([...seen].sort((a, b) => order.indexOf(a) - order.indexOf(b)))
      expect(await eventSubjects(db, `events.node.${nodeId}.upgrade_`)).toEqual(
        expect.arrayContaining([`events.node.${nodeId}.upgrade_started`, `events.node.${nodeId}.upgrade_completed`]),
      )
      const notes = (await db('notifications').where({ user_id: fleet.operatorId }).orderBy('created_at').pluck('kind')) as string[]
      expect(notes).toEqual(['rollout_started', 'rollout_completed'])
      // Told once the nodes are planned: how many it upgrades (issue 20: never "0 nodes").
      const startedNote = (await db('notifications').where({ user_id: fleet.operatorId, kind: 'rollout_started' }).first('title')) as { title: string }
      expect(startedNote.title).toBe(`Rollout ${rollout.id} of ${rollout.chain_profile_id} started: ${fleet.nodes.length} ${fleet.nodes.length === 1 ? 'node' : 'nodes'} to upgrade`)
    })

    it('a bad checksum fails the node and the agent leaves 1.0.0 running; the threshold pauses the rollout, force takes it on, it ends failed', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet } = await setUp(context, 3)
      const rollout = await devnetRollout(db, fleet, { batch_size: 1, failure_threshold: 0.5, target_binary_checksum: `sha256:${'ab'.repeat(32)}` })
      await startRollout(db, rollout.id, { by: fleet.operatorId })

      const paused = await untilStatus(db, rollout.id, ['paused', 'completed', 'failed'])
      expect(paused).toMatchObject({ status: 'paused', pause_reason: 'failure_threshold', failed_nodes: 1, succeeded_nodes: 0, current_batch: 0 })
      const [first] = await listRolloutNodes(db, rollout.id)
      expect(first).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back' })
      expect(first?.error_message).toMatch(/checksum|sha256/i)
      expect(['syncing', 'healthy']).toContain((await findNode(db, first?.node_id as string))?.state)
      // The upgrade's own moves come last; only the heartbeat evaluation may have found it healthy since.
      const moves = await stateMoves(db, first?.node_id as string)
      const fromUpgrade = moves.slice(moves.lastIndexOf('upgrade:maintenance'))
      expect(fromUpgrade.slice(0, 2)).toEqual(['upgrade:maintenance', 'upgrade:syncing'])
      expect(fromUpgrade.slice(2).every((m) => m === 'heartbeat_evaluation:healthy')).toBe(true)
      expect(await binaryVersions(db, [first?.node_id as string])).toEqual(['1.0.0'])

      // resume is refused while it runs, and only a paused rollout resumes: force it past the threshold.
      await expect(signalRollout(db, rollout.id, 'approve_canary', { by: fleet.operatorId })).rejects.toThrow(/cannot approve canary rollout .*: it is paused/)
      await signalRollout(db, rollout.id, 'force', { by: fleet.operatorId })
      const failed = await untilStatus(db, rollout.id, ['failed', 'completed'])
      expect(failed).toMatchObject({ status: 'failed', forced: true, failed_nodes: 3, succeeded_nodes: 0 })
      expect(failed.error_message).toMatch(/3 node\(s\) failed/)
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0', '1.0.0', '1.0.0'])
      await expect(signalRollout(db, rollout.id, 'resume', { by: fleet.operatorId })).rejects.toThrow(/cannot resume rollout .*: it is failed/)
      const notes = (await db('notifications').where({ user_id: fleet.operatorId }).orderBy('created_at').pluck('kind')) as string[]
      expect(notes).toEqual(['rollout_started', 'rollout_paused', 'rollout_failed'])
    })

    it('an artifact that crashes after it starts fails health validation and is undone on that node', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, dir: newDir } = await setUp(context, 1)
      const dir = newDir()
      const crash = crashingArtifact(dir)
      const rollout = await devnetRollout(db, fleet, { target_version: '9.9.9-crash', target_binary_url: crash.url, target_binary_checksum: crash.checksum, health_wait_duration_ms: 4_000 })
      await startRollout(db, rollout.id, { by: fleet.operatorId })
      const done = await untilStatus(db, rollout.id, ['failed', 'completed', 'paused'])
      expect(done.status).not.toBe('completed')
      const [node] = await listRolloutNodes(db, rollout.id)
      expect(node).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back' })
      expect(node?.error_message).toMatch(/^health validation failed: /)
      const phases = await eventPayloads<{ upgrade_phase: string }>(db, `events.node.${node?.node_id}.upgrade_phase_changed`)
      expect(phases.map((p) => p.upgrade_phase)).toContain('rollbacking')
      // Back on 1.0.0, and the node answers again.
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0'])
      await waitFor(async () => (await reportedVersions(db, fleet.nodes))[0] === '1.0.0', 'the agent to report 1.0.0 again', 30_000, 200)
      expect(['syncing', 'healthy']).toContain((await findNode(db, node?.node_id as string))?.state)
      expect((await requireRollout(db, rollout.id)).failed_nodes).toBe(1)
    })
    it('a node on a version no release lists (a rollout installed it) is reverted to that rollout\'s artifact', { timeout: 240_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, dir: newDir } = await setUp(context, 1)
      const dir = newDir()
      // 1.1.1: devnet-node 1.1.0's program under a version the catalogue does not list.
      const artifact = path.join(dir, 'devnet-node-1.1.1.mjs')
      fs.copyFileSync(DEVNET_1_1_0, artifact)
      const first = await devnetRollout(db, fleet, { target_version: '1.1.1', target_binary_url: pathToFileURL(artifact).href, target_binary_checksum: `sha256:${sha256File(artifact)}` })
      await startRollout(db, first.id, { by: fleet.operatorId })
      expect(await untilStatus(db, first.id, ['completed', 'failed', 'paused'])).toMatchObject({ status: 'completed' })
      await waitFor(async () => (await findNode(db, fleet.nodes[0] as string))?.state === 'healthy', 'the node to be healthy on 1.1.1', 60_000, 200)

      // Manual mode takes 1.1.1 as a source: a rollout installed it, so the nodes can go back to it.
      const crash = crashingArtifact(dir)
      const catalogue = fleet.setting.deps.chains.current()
      const second = await createRollout(
        db,
        { chain_profile_id: 'devnet', node_type: 'full', binary_name: 'devnet-node', source_version: '1.1.1', target_version: '9.9.9-crash', target_binary_url: crash.url, target_binary_checksum: crash.checksum, health_wait_duration: '4s' },
        // The crashing program is a file in the test's directory: an allowed source (docs/artifacts.md).
        { createdBy: fleet.operatorId, catalogue, now: new Date(), artifactSources: [`${pathToFileURL(dir).href}/`] },
      )
      await startRollout(db, second.id, { by: fleet.operatorId })
      await untilStatus(db, second.id, ['failed', 'completed', 'paused'])
      const [node] = await listRolloutNodes(db, second.id)
      expect(node).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back', previous_version: '1.1.1', previous_binary_url: pathToFileURL(artifact).href })
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.1'])
      await waitFor(async () => (await reportedVersions(db, fleet.nodes))[0] === '1.1.1', 'the agent to report 1.1.1 again', 30_000, 200)
    })
  })
}
