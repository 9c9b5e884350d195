/**
 * A drain that waits on a node that cannot move yet (docs/infrastructure.md, "Drain"), on both
 * databases, with the real host-drain workflow on a workflow worker: however long it waits, its
 * journal stays a few steps (it looks from inside one step, not a step and a durable timer per
 * look), and once the node is gone it completes. No node is moved here, so no host is reached;
 * host-drain.test.ts moves real nodes.
 */
import crypto from 'node:crypto'
import { pathToFileURL } from 'node:url'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { DEFAULT_INSTANCE_TYPES } from '../../../src/hosts/instance-types.js'
import { moveHost } from '../../../src/hosts/service.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import { insertHost, type Host } from '../../../src/hosts/store.js'
import { createLogger } from '../../../src/log.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import type { LifecycleDeps } from '../../../src/provisioning/index.js'
import { SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import { HOST_DRAIN_WORKFLOW } from '../../../src/provisioning/workflow-names.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startLifecycleWorker, untilRunFinished } from '../provisioning/harness.js'

const quiet = createLogger({ level: 'silent' })
const CAPACITY = { cpu: 8, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 }
/** How often the drain looks again at the node it waits for. */
const DRAIN_POLL_MS = 50

describe.each(DIALECTS)('a waiting host drain on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let pool: SshPool
  let worker: WorkflowWorker

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    pool = createSshPool({})
    const keys = fileSshKeyStore(tempDir('nodeplane-drain-wait-keys-'))
    const provider = new SshInfrastructureProvider({ db, pool, keys, logger: quiet, instanceTypes: DEFAULT_INSTANCE_TYPES, placementWaitMs: 1_000, placementRetryIntervalMs: 100 })
    const deps: LifecycleDeps = {
      db,
      logger: quiet,
      chains: staticChainSource(await loadChainCatalogue(defaultConfigDir())),
      masterKey: LocalFileMasterKey.fromBytes(crypto.randomBytes(32)),
      providers: new Map([[provider.name, provider]]),
      // No agent is started here: the drain only waits, then cordons the empty host.
      agentBootstrap: { gatewayTarget: '127.0.0.1:1', caPem: '' },
      backupStoreUrl: pathToFileURL(tempDir('nodeplane-drain-wait-backups-')).href,
      migrationCooldownMs: 3_600_000,
      fenceTimeoutMs: 3_000,
      agentReadyWaitMs: 30_000,
      commandTimeoutMs: 30_000,
      pollIntervalMs: 50,
      drainPollIntervalMs: DRAIN_POLL_MS,
    }
    worker = startLifecycleWorker(db, deps, 2)
  })
  afterEach(async () => {
    await worker?.stop()
    await pool?.close()
    await t?.destroy()
  })

  const addHost = (name: string): Promise<Host> =>
    insertHost(db, { id: crypto.randomUUID(), name, address: '10.213.252.2', port: 22, user: 'root', region: 'test-1', rootDir: '/srv/np', capacity: CAPACITY, labels: {}, hostKeyFingerprint: `SHA256:${'A'.repeat(43)}`, now: new Date() })

  it('journals a bounded number of steps however many times it looks at a node that cannot move, and completes once the node is gone', async () => {
    const host = await addHost('wait-1')
    const node = await insertNode(db, { subscription_id: await insertSubscription(db, await insertUser(db)), chain_profile_id: 'devnet', node_type: 'full', provider: 'ssh', region: 'test-1', instance_type: 'ssh.small' })
    await setNodeState(db, node.id, 'syncing')
    await db('nodes').where({ id: node.id }).update({ host_id: `${host.id}/${node.id}` })

    expect((await moveHost({ db }, host.name, 'drain')).state).toBe('draining')
    const drain = (await db('host_drains').where({ host_id: host.id }).first('id')) as { id: string }
    const run = (await db('workflow_runs').where({ workflow_name: HOST_DRAIN_WORKFLOW, workflow_key: drain.id }).first('id')) as { id: string }
    await waitFor(async () => (await db('host_drains').where({ id: drain.id }).first('activity')).activity === `waiting: node ${node.id} is syncing`, 'the drain to wait on the syncing node', 10_000, 50)

    // Sixty drain poll intervals and more pass.
    await new Promise((resolve) => setTimeout(resolve, 60 * DRAIN_POLL_MS))
    const steps = async () => (await db('workflow_steps').where({ run_id: run.id }).select('step_key')) as Array<{ step_key: string }>
    const waited = await steps()
    // next-node#0 and the wait step (a look per step before: 60 next-node steps and 60 timers).
    expect(waited.length, JSON.stringify(waited)).toBeLessThanOrEqual(3)
    expect(waited.map((s) => s.step_key)).toContain('wait-for-nodes#0')
    expect((await db('hosts').where({ id: host.id }).first('state')).state).toBe('draining')

    // The node goes away (terminated): the next look sees an empty host, the drain completes.
    await setNodeState(db, node.id, 'terminated')
    const finished = await untilRunFinished(db, run.id, 15_000)
    expect(finished).toMatchObject({ status: 'completed', result: { status: 'completed', nodes_moved: 0 } })
    expect((await db('hosts').where({ id: host.id }).first('state')).state).toBe('cordoned')
    expect((await steps()).length).toBeLessThanOrEqual(6)
  })
})
