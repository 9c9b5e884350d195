/**
 * Rollout groups on a real devnet node, on both databases: two components in order (devnet-node
 * 1.1.0, then an artifact that crashes after it starts), with a health gate between them; the
 * second component fails, and each failure policy decides: partial_ok -> partial;
 * rollback_all -> the first component's upgrade undone, rolled_back; manual -> paused for the
 * operator, who cancels.
 */
import fs from 'node:fs'
import { pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { signalRolloutGroup, startRolloutGroup } from '../../../src/rollouts/control.js'
import type { FailurePolicy, RolloutGroupStatus } from '../../../src/rollouts/states.js'
import { insertRolloutGroup, listGroupRollouts, listRolloutNodes, requireRolloutGroup, type GroupComponent, type RolloutGroupRecord } from '../../../src/rollouts/store.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { binaryVersions, crashingArtifact, DEVNET_1_1_0, sha256File, startFleet, type Fleet } from './harness.js'

function component(version: string, url: string, checksum: string): GroupComponent {
  return { binary_name: 'devnet-node', node_type: 'full', version, url, checksum, upgrade_id: null, migration_type: 'non_breaking', manifest_content_hash: null, manifest: null }
}

describe.each(DIALECTS)('rollout groups on a real devnet node, %s', (dialect) => {
  let t: TestDatabase | undefined
  let fleet: Fleet | undefined
  const dirs: string[] = []
  afterEach(async () => {
    await fleet?.stop()
    await t?.destroy()
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true })
    fleet = undefined
    t = undefined
  })

  async function groupWith(policy: FailurePolicy): Promise<{ db: Db; fleet: Fleet; group: RolloutGroupRecord }> {
    t = await createTestDatabase(dialect)
    fleet = await startFleet(t.db, 1)
    const dir = tempDir()
    dirs.push(dir)
    const crash = crashingArtifact(dir)
    const group = await insertRolloutGroup(
      t.db,
      {
        chain_profile_id: 'devnet',
        node_type: 'full',
        failure_policy: policy,
        component_order: [component('1.1.0', pathToFileURL(DEVNET_1_1_0).href, `sha256:${sha256File(DEVNET_1_1_0)}`), component('9.9.9-crash', crash.url, crash.checksum)],
        desired_versions: { 'devnet-node': '9.9.9-crash' },
        strategy: 'rolling',
        batch_size: 1,
        canary_size: null,
        failure_threshold: 0.5,
        health_wait_duration_ms: 3_000,
        created_by: fleet.operatorId,
      },
      new Date(),
    )
    return { db: t.db, fleet, group }
  }

  const untilGroup = (db: Db, id: string, statuses: RolloutGroupStatus[]) =>
    waitFor(async () => {
      const g = await requireRolloutGroup(db, id)
      return statuses.includes(g.status) ? g : undefined
    }, `group ${id} to be ${statuses.join(' or ')}`, 180_000, 200)

  it('partial_ok: the first component upgrades and passes its health gate, the second fails, the group is partial', { timeout: 300_000 }, async () => {
    const { db, fleet, group } = await groupWith('partial_ok')
    await startRolloutGroup(db, group.id, { by: fleet.operatorId })
    await expect(startRolloutGroup(db, group.id, { by: fleet.operatorId })).rejects.toThrow(/it is running/)
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

  it('rollback_all: the second component fails and the first one is rolled back too', { timeout: 300_000 }, async () => {
    const { db, fleet, group } = await groupWith('rollback_all')
    await startRolloutGroup(db, group.id, { by: fleet.operatorId })
    const done = await untilGroup(db, group.id, ['rolled_back', 'partial', 'completed', 'failed'])
    expect(done.status).toBe('rolled_back')
    const [first, second] = await listGroupRollouts(db, group.id)
    expect([first?.status, second?.status]).toEqual(['completed', 'rolled_back'])
    expect((await listRolloutNodes(db, first?.id as string)).map((n) => [n.status, n.upgrade_phase])).toEqual([['rolled_back', 'rolled_back']])
    expect(await binaryVersions(db, fleet.nodes)).toEqual(['1.0.0'])
  })

  it('manual: the group pauses for the operator after the failure; a paused group is not started again; cancel ends it', { timeout: 300_000 }, async () => {
    const { db, fleet, group } = await groupWith('manual')
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
})
