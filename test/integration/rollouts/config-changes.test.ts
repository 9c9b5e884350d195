/**
 * A manifest's config_changes on real devnet nodes, on both databases: the upgrade writes the
 * files and the process's run spec with the new binary; a node migrated afterwards gets the same
 * configuration on its new host; a rollback, or the revert after a failed health validation, puts
 * back the configuration the previous version ran.
 */
import fs from 'node:fs'
import path from 'node:path'
import { it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { requestMigration, type MigrateResult } from '../../../src/provisioning/index.js'
import { signalRollout, startRollout } from '../../../src/rollouts/control.js'
import type { RolloutManifestData } from '../../../src/rollouts/manifests.js'
import { listRolloutNodes } from '../../../src/rollouts/store.js'
import { getRun } from '../../../src/workflows/index.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { binaryVersions, crashingArtifact, devnetRollout, fleetTests, untilStatus } from './harness.js'

const manifest: RolloutManifestData = {
  description: 'devnet 1.1.0 with four peers',
  recovery_plan: 'roll back',
  state_compatibility: { compatible_source_versions: ['1.0.0'] },
  config_changes: {
    config_version: 'four-peers',
    // Four peers tell this configuration from the profile's. Its sync (4 blocks of 250 ms) is
    // short: the upgraded node is waited for until healthy after its upgrade and its migration.
    files: [
      {
        path: 'config/devnet.json',
        mode: 0o644,
        template: '{"rpc_host":"127.0.0.1","rpc_port":{{rpc_port}},"block_time_ms":250,"sync_blocks":4,"peers":4,"chain_id":1337,"archive":false}\n',
      },
    ],
    run: { env: { DEVNET_NOTE: 'configured for {{version}}' } },
  },
}

interface HostConfiguration {
  peers: number
  note: string | undefined
  version: string
  config_version: string | null
}

// The two databases' suites at once, and each one's tests at once (each with a fleet of its own).
describeEachDialectConcurrently('rollout config changes on real devnet nodes, %s', (dialect) => {
  const setUp = fleetTests(dialect)

  /** What the node's current host runs: its config file and active deployment. */
  async function hostConfiguration(db: Db, root: string, nodeId: string): Promise<HostConfiguration> {
    const state = path.join(root, String((await findNode(db, nodeId))?.host_id), 'state')
    const config = JSON.parse(fs.readFileSync(path.join(state, 'config', 'devnet.json'), 'utf8')) as { peers: number }
    const active = JSON.parse(fs.readFileSync(path.join(state, 'active.json'), 'utf8')) as { version: string; config_version: string | null; run: { env: Record<string, string> } }
    return { peers: config.peers, note: active.run.env.DEVNET_NOTE, version: active.version, config_version: active.config_version }
  }
  const recordedConfigVersion = async (db: Db, nodeId: string) =>
    ((await db('node_config_state').where({ node_id: nodeId }).first('config_version')) as { config_version: string | null } | undefined)?.config_version

  it.concurrent('writes files and run with the binary, keeps them through a migration, and a rollback puts the previous configuration back', { timeout: 300_000 }, async (context) => {
    const { expect } = context
    const { db, fleet } = await setUp(context, 2)
    const root = fleet.setting.root
    const rollout = await devnetRollout(db, fleet, { batch_size: 1, manifest })
    await startRollout(db, rollout.id, { by: fleet.operatorId })
    await waitFor(async () => ['in_progress', 'validating', 'succeeded'].includes((await listRolloutNodes(db, rollout.id))[0]?.status ?? 'none') || undefined, 'the first batch to start', 60_000, 20)
    await signalRollout(db, rollout.id, 'pause', { by: fleet.operatorId })
    await untilStatus(db, rollout.id, ['paused'])
    const upgraded = (await listRolloutNodes(db, rollout.id)).find((n) => n.status === 'succeeded')?.node_id as string
    const untouched = fleet.nodes.find((id) => id !== upgraded) as string

    // The upgrade wrote the manifest's files and run with 1.1.0; the other node still runs the profile's.
    const changed = { peers: 4, note: 'configured for 1.1.0', version: '1.1.0', config_version: 'four-peers' }
    expect(await hostConfiguration(db, root, upgraded)).toEqual(changed)
    expect(await recordedConfigVersion(db, upgraded)).toBe('four-peers')
    expect(await hostConfiguration(db, root, untouched)).toEqual({ peers: 3, note: undefined, version: '1.0.0', config_version: null })

    // A migration re-creates the node as it runs: 1.1.0 with the rollout's configuration.
    await waitFor(async () => (await findNode(db, upgraded))?.state === 'healthy' || undefined, 'the upgraded node to be healthy', 60_000, 200)
    const oldHost = (await findNode(db, upgraded))?.host_id
    const migration = await requestMigration(db, upgraded, { reason: 'operator', force: true })
    const run = await waitFor(async () => {
      const current = await getRun(db, migration.run.id)
      return current && (current.status === 'completed' || current.status === 'failed') ? current : undefined
    }, 'the migration to finish', 120_000, 200)
    expect(run.status, run.error ?? '').toBe('completed')
    expect((run.result as MigrateResult).host_id).not.toBe(oldHost)
    expect(await hostConfiguration(db, root, upgraded)).toEqual(changed)
    expect(await recordedConfigVersion(db, upgraded)).toBe('four-peers')
    // The chain runs with it: devnet-node reports the configured peer count.
    await waitFor(async () => {
      const row = (await db('agent_status').where({ node_id: upgraded }).first('metrics')) as { metrics: unknown } | undefined
      const metrics = typeof row?.metrics === 'string' ? (JSON.parse(row.metrics) as Record<string, number>) : (row?.metrics as Record<string, number> | undefined)
      return metrics?.peer_count === 4 || undefined
    }, 'the migrated chain to report 4 peers', 60_000, 200)

    // Rolled back: 1.0.0 with the configuration 1.0.0 runs, from the chain profile.
    await signalRollout(db, rollout.id, 'rollback', { by: fleet.operatorId })
    expect(await untilStatus(db, rollout.id, ['rolled_back', 'failed', 'completed'])).toMatchObject({ status: 'rolled_back' })
    expect(await binaryVersions(db, [upgraded])).toEqual(['1.0.0'])
    expect(await hostConfiguration(db, root, upgraded)).toEqual({ peers: 3, note: undefined, version: '1.0.0', config_version: null })
    expect(await recordedConfigVersion(db, upgraded)).toBeNull()
  })

  it.concurrent('a new version that fails its health validation goes back with the configuration it replaced', { timeout: 240_000 }, async (context) => {
    const { expect } = context
    const { db, fleet, dir: newDir } = await setUp(context, 1)
    const dir = newDir()
    const crash = crashingArtifact(dir)
    const rollout = await devnetRollout(db, fleet, { target_version: '9.9.9-crash', target_binary_url: crash.url, target_binary_checksum: crash.checksum, health_wait_duration_ms: 4_000, manifest })
    await startRollout(db, rollout.id, { by: fleet.operatorId })
    expect((await untilStatus(db, rollout.id, ['failed', 'completed', 'paused'])).status).not.toBe('completed')
    // Undone by the control plane after the validation, not by the agent's own compensation.
    expect((await listRolloutNodes(db, rollout.id))[0]).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back', error_message: expect.stringMatching(/^health validation failed: /) })
    const nodeId = fleet.nodes[0] as string
    expect(await binaryVersions(db, [nodeId])).toEqual(['1.0.0'])
    expect(await hostConfiguration(db, fleet.setting.root, nodeId)).toEqual({ peers: 3, note: undefined, version: '1.0.0', config_version: null })
    expect(await recordedConfigVersion(db, nodeId)).toBeNull()
  })
})
