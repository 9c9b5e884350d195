/**
 * Rollout groups on a real devnet node, on both databases: two components in order (devnet-node
 * 1.1.0, then an artifact that crashes after it starts), with a health gate between them; the
 * second component fails, and each failure policy decides: partial_ok -> partial;
 * rollback_all -> the first component's upgrade undone, rolled_back; manual -> paused for the
 * operator, who cancels. Then the operator's skip and cancel of a running component, which are
 * not failures (no policy, no rollback), and a component that ends `failed` below its threshold,
 * whose own upgraded node rollback_all rolls back.
 */
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, it, type TestContext } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { signalRolloutGroup, startRolloutGroup } from '../../../src/rollouts/control.js'
import type { FailurePolicy, RolloutGroupStatus } from '../../../src/rollouts/states.js'
import { insertRolloutGroup, listGroupRollouts, listRolloutNodes, requireRollout, requireRolloutGroup, type GroupComponent, type RolloutGroupRecord } from '../../../src/rollouts/store.js'
import { findRunByKey } from '../../../src/workflows/index.js'
import { GROUP_WORKFLOW } from '../../../src/rollouts/workflow-names.js'
import type { Dialect } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { binaryVersions, crashingArtifact, DEVNET_1_1_0, fleetTests, sha256File, type Fleet } from './harness.js'

function component(version: string, url: string, checksum: string): GroupComponent {
  return { binary_name: 'devnet-node', node_type: 'full', version, url, checksum, upgrade_id: null, migration_type: 'non_breaking', manifest_content_hash: null, manifest: null }
}

/** devnet-node 1.1.0 under another version (a component that upgrades as well as 1.1.0 does). */
function devnetAs(dir: string, version: string): GroupComponent {
  const file = path.join(dir, `devnet-node-${version}.mjs`)
  fs.copyFileSync(DEVNET_1_1_0, file)
  return component(version, pathToFileURL(file).href, `sha256:${sha256File(file)}`)
}

/** devnet-node 1.1.0 that crashes a second after it starts on one node (its host's directory names it), and runs on the others. */
function crashingOn(dir: string, version: string, nodeId: string): GroupComponent {
  const file = path.join(dir, `devnet-node-${version}.mjs`)
  const crash = `if (process.cwd().includes(${JSON.stringify(nodeId)}) || (process.argv[1] ?? '').includes(${JSON.stringify(nodeId)})) { setTimeout(() => { process.stderr.write('crashing on purpose\\n'); process.exit(3) }, 1200) }\n`
  fs.writeFileSync(file, crash + fs.readFileSync(DEVNET_1_1_0, 'utf8').replace(/^#!.*\n/, ''))
  return component(version, pathToFileURL(file).href, `sha256:${sha256File(file)}`)
}

/** The suite on the given databases: one file per database keeps each file short (groups.sqlite.test.ts, groups.postgres.test.ts). */
export function rolloutGroupsSuite(dialects: readonly Dialect[]): void {
  describe.each(dialects)('rollout groups on a real devnet node, %s', (dialect) => {
    // Each test has a database and a fleet of its own, one test after another: three fleets at once starved each other in the full suite (two cores).
    const setUp = fleetTests(dialect)

    const DEVNET_110 = () => component('1.1.0', pathToFileURL(DEVNET_1_1_0).href, `sha256:${sha256File(DEVNET_1_1_0)}`)

    /** A fleet of `size` nodes and a group of the components `components(dir, nodes)` builds. */
    async function groupOf(
      context: TestContext,
      policy: FailurePolicy,
      components: (dir: string, nodes: string[]) => GroupComponent[],
      options: { size?: number; batchSize?: number } = {},
    ): Promise<{ db: Db; fleet: Fleet; group: RolloutGroupRecord }> {
      const { db, fleet, dir } = await setUp(context, options.size ?? 1)
      const order = components(dir(), fleet.nodes)
      const group = await insertRolloutGroup(
        db,
        {
          chain_profile_id: 'devnet',
          node_type: 'full',
          failure_policy: policy,
          component_order: order,
          desired_versions: { 'devnet-node': order.at(-1)?.version as string },
          strategy: 'rolling',
          batch_size: options.batchSize ?? 1,
          canary_size: null,
          failure_threshold: 0.5,
          health_wait_duration_ms: 3_000,
          created_by: fleet.operatorId,
        },
        new Date(),
      )
      return { db, fleet, group }
    }

    function groupWith(context: TestContext, policy: FailurePolicy): Promise<{ db: Db; fleet: Fleet; group: RolloutGroupRecord }> {
      return groupOf(context, policy, (dir) => {
        const crash = crashingArtifact(dir)
        return [DEVNET_110(), component('9.9.9-crash', crash.url, crash.checksum)]
      })
    }

    /** The component's rollout once one of its nodes is being upgraded (in progress or validating). */
    const untilComponentUpgrading = (db: Db, groupId: string, index: number) =>
      waitFor(async () => {
        const r = (await listGroupRollouts(db, groupId)).find((x) => x.component_index === index)
        if (!r) return undefined
        return (await listRolloutNodes(db, r.id)).some((n) => n.status === 'in_progress' || n.status === 'validating') ? r : undefined
      }, `component ${index} of group ${groupId} to be upgrading a node`, 120_000, 50)

    const untilGroup = (db: Db, id: string, statuses: RolloutGroupStatus[]) =>
      waitFor(async () => {
        const g = await requireRolloutGroup(db, id)
        return statuses.includes(g.status) ? g : undefined
      }, `group ${id} to be ${statuses.join(' or ')}`, 180_000, 200)

    it('partial_ok: the first component upgrades and passes its health gate, the second fails, the group is partial', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, group } = await groupWith(context, 'partial_ok')
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      // A repeat: answered as it is, nothing started twice.
      expect(await startRolloutGroup(db, group.id, { by: fleet.operatorId })).toMatchObject({ status: 'running', changed: false })
      const done = await untilGroup(db, group.id, ['partial', 'completed', 'failed', 'rolled_back'])
      expect(done.status).toBe('partial')
      // The second component's one node failed: over its failure threshold it stopped, and the
      // group ended it (cancelled) so it does not hold the chain's one active rollout.
      expect(done.error_message).toMatch(/component 1 stopped for its failures/)
      const rollouts = await listGroupRollouts(db, group.id)
      expect(rollouts.map((r) => [r.component_index, r.source_version, r.target_version, r.status])).toEqual([
        [0, '1.0.0', '1.1.0', 'completed'],
        [1, '1.1.0', '9.9.9-crash', 'cancelled'],
      ])
      // The node keeps the first component's version: the second was undone on it.
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0'])
    })

    it('rollback_all: the second component fails and the first one is rolled back too', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, group } = await groupWith(context, 'rollback_all')
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      const done = await untilGroup(db, group.id, ['rolled_back', 'partial', 'completed', 'failed'])
      expect(done.status).toBe('rolled_back')
      const [first, second] = await listGroupRollouts(db, group.id)
      expect([first?.status, second?.status]).toEqual(['completed', 'rolled_back'])
      expect((await listRolloutNodes(db, first?.id as string)).map((n) => [n.status, n.upgrade_phase])).toEqual([['rolled_back', 'rolled_back']])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0'])
    })

    it('manual: the group pauses for the operator after the failure; a paused group is not started again; cancel ends it', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, group } = await groupWith(context, 'manual')
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      const paused = await untilGroup(db, group.id, ['paused', 'partial', 'completed', 'failed'])
      expect(paused).toMatchObject({ status: 'paused', pause_reason: 'component_failed' })
      await expect(startRolloutGroup(db, group.id, { by: fleet.operatorId })).rejects.toThrow(/it is paused/)
      await signalRolloutGroup(db, group.id, 'cancel', { by: fleet.operatorId })
      expect((await untilGroup(db, group.id, ['cancelled'])).status).toBe('cancelled')
      await waitFor(async () => (await listGroupRollouts(db, group.id))[1]?.status === 'cancelled' || undefined, 'the stopped component to be cancelled', 60_000, 200)
      await expect(signalRolloutGroup(db, group.id, 'resume', { by: fleet.operatorId })).rejects.toThrow(/it is cancelled/)
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.0'])
    })

    it('skip of a running component is no failure: its in-flight node finishes, it is cancelled, and the group goes on with the next one (rollback_all: nothing rolled back)', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, group } = await groupOf(context, 'rollback_all', (dir) => [DEVNET_110(), devnetAs(dir, '1.1.1')])
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      const first = await untilComponentUpgrading(db, group.id, 0)
      await signalRolloutGroup(db, group.id, 'skip', { by: fleet.operatorId })
      const done = await untilGroup(db, group.id, ['completed', 'partial', 'rolled_back', 'failed', 'cancelled'])
      expect(done).toMatchObject({ status: 'completed', error_message: null, current_component_index: null })
      const rollouts = await listGroupRollouts(db, group.id)
      expect(rollouts.map((r) => [r.component_index, r.source_version, r.target_version, r.status])).toEqual([
        [0, '1.0.0', '1.1.0', 'cancelled'],
        [1, '1.1.0', '1.1.1', 'completed'],
      ])
      expect(rollouts[0]?.id).toBe(first.id)
      // The skipped component's node was upgraded (cancel lets in-flight nodes finish), then the next one's.
      expect((await listRolloutNodes(db, first.id)).map((n) => n.status)).toEqual(['succeeded'])
      expect((await listRolloutNodes(db, rollouts[1]?.id as string)).map((n) => n.status)).toEqual(['succeeded'])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.1'])
      // Each component's start told the operator, as a standalone rollout's does.
      const started = (await db('notifications').where({ user_id: fleet.operatorId, kind: 'rollout_started' }).pluck('data')) as unknown[]
      expect(started.map((d) => (typeof d === 'string' ? (JSON.parse(d) as { rollout_id: string }) : (d as { rollout_id: string })).rollout_id).sort()).toEqual(rollouts.map((r) => r.id).sort())
    })

    it('cancel of a running group ends it cancelled once its component has stopped, with no rollback of the components done (rollback_all)', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      const { db, fleet, group } = await groupOf(context, 'rollback_all', (dir) => [DEVNET_110(), devnetAs(dir, '1.1.1')])
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      const second = await untilComponentUpgrading(db, group.id, 1)
      await signalRolloutGroup(db, group.id, 'cancel', { by: fleet.operatorId })
      const done = await untilGroup(db, group.id, ['cancelled', 'completed', 'partial', 'rolled_back', 'failed'])
      expect(done).toMatchObject({ status: 'cancelled', error_message: null })
      // The group ends after its component: nothing of it is still active.
      expect((await requireRollout(db, second.id)).status).toBe('cancelled')
      const rollouts = await listGroupRollouts(db, group.id)
      expect(rollouts.map((r) => [r.component_index, r.status])).toEqual([
        [0, 'completed'],
        [1, 'cancelled'],
      ])
      for (const r of rollouts) expect((await listRolloutNodes(db, r.id)).map((n) => n.status)).toEqual(['succeeded'])
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.1.1'])
      // The group's workflow ended normally (no step refused by the group table).
      await waitFor(async () => (await findRunByKey(db, GROUP_WORKFLOW, group.id))?.status === 'completed' || undefined, 'the group workflow to complete', 30_000, 100)
      await expect(signalRolloutGroup(db, group.id, 'resume', { by: fleet.operatorId })).rejects.toThrow(/it is cancelled/)
    })

    it('rollback_all: a component that ends failed below its threshold has its own upgraded nodes rolled back', { timeout: 300_000 }, async (context) => {
      const { expect } = context
      // Two nodes in one batch, threshold 0.5: one fails (1 of 2 is not above it), the rollout ends failed.
      const { db, fleet, group } = await groupOf(context, 'rollback_all', (dir, nodes) => [crashingOn(dir, '9.9.9-half', nodes[0] as string)], { size: 2, batchSize: 2 })
      await startRolloutGroup(db, group.id, { by: fleet.operatorId })
      const done = await untilGroup(db, group.id, ['rolled_back', 'partial', 'completed', 'failed', 'cancelled'])
      expect(done.status).toBe('rolled_back')
      expect(done.error_message).toMatch(/component 0 ended failed/)
      const [only] = await listGroupRollouts(db, group.id)
      expect(only).toMatchObject({ status: 'failed', failed_nodes: 1, succeeded_nodes: 1 })
      const nodes = new Map((await listRolloutNodes(db, only?.id as string)).map((n) => [n.node_id, n]))
      // The crashing node was undone by its own validation failure; the other was upgraded, then rolled back.
      expect(nodes.get(fleet.nodes[0] as string)).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back' })
      expect(nodes.get(fleet.nodes[1] as string)).toMatchObject({ status: 'rolled_back', upgrade_phase: 'rolled_back' })
      expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0', '1.0.0'])
    })
  })
}
