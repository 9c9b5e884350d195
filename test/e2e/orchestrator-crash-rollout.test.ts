import fs from 'node:fs'
import { afterEach, expect, it } from 'vitest'
import { evaluateHeartbeats } from '../../src/health/heartbeat-evaluation.js'
import { createLogger } from '../../src/log.js'
import { findNode, insertNode } from '../../src/nodes/node-store.js'
import { LocalInfrastructureProvider } from '../../src/provisioning/infrastructure/local.js'
import { requestProvision } from '../../src/provisioning/index.js'
import { startRollout } from '../../src/rollouts/control.js'
import { listRolloutNodes, requireRollout } from '../../src/rollouts/store.js'
import { spawnNodeplane } from '../helpers/cli.js'
import { orchestratorDaemonEnv } from '../helpers/orchestrator-daemon.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../helpers/db.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { waitFor } from '../helpers/ports.js'
import { quiet, startGateway, type RunningGateway } from '../integration/agent-gateway/harness.js'
import { devnetRollout } from '../integration/rollouts/harness.js'

/**
 * `nodeplane daemon orchestrator` processes running a rollout of two real devnet nodes, one per
 * batch; the first orchestrator is killed with SIGKILL while the first batch's node is being
 * upgraded, the second takes the run over after the lease expires and finishes the rollout: every
 * node upgraded once, with one upgrade command each.
 */
// The two dialects' cases at the same time: each mostly waits (a lease to expire, heartbeats,
// health windows) on a database, gateway, NATS and orchestrators of its own.
describeEachDialectConcurrently('orchestrator killed mid-batch on %s', (dialect) => {
  let database: TestDatabase | undefined
  let gateway: RunningGateway | undefined
  let hostsDir: string | undefined
  let nats: NatsServer | undefined
  let evaluator: NodeJS.Timeout | undefined

  afterEach(async () => {
    if (evaluator) clearInterval(evaluator)
    await nats?.destroy()
    nats = undefined
    if (hostsDir) {
      const provider = new LocalInfrastructureProvider({ root: hostsDir, logger: quiet })
      for (const host of fs.readdirSync(hostsDir)) await provider.destroyHost(host)
    }
    await gateway?.stop()
    await database?.destroy()
    database = undefined
    gateway = undefined
  })

  it('resumes the rollout on another orchestrator: each node upgraded once, one command each', { timeout: 240_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    gateway = await startGateway(db, { heartbeatFlushIntervalMs: 50, commandPollIntervalMs: 50, heartbeatIntervalSeconds: 1 })
    nats = await startNats()
    const daemon = await orchestratorDaemonEnv(database.url, nats.url, gateway)
    hostsDir = daemon.hostsDir
    const env = daemon.env
    // The heartbeat evaluation, as the health-evaluator runs it (nodes become healthy).
    const logger = createLogger({ level: 'silent' })
    evaluator = setInterval(() => void evaluateHeartbeats(db, { now: new Date(), heartbeatTimeoutMs: 60_000, intervalMs: 1_000, logger }).catch(() => undefined), 300)

    const operator = await insertUser(db)
    const nodes: string[] = []
    for (let i = 0; i < 2; i++) {
      const subscription = await insertSubscription(db, await insertUser(db))
      const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })
      await requestProvision(db, node.id)
      nodes.push(node.id)
    }
    let doomed = spawnNodeplane(['daemon', 'orchestrator'], { env })
    await waitFor(async () => (await Promise.all(nodes.map((id) => findNode(db, id)))).every((n) => n?.state === 'healthy'), 'the nodes to be healthy', 120_000, 200)

    const rollout = await devnetRollout(db, { operatorId: operator }, { batch_size: 1, health_wait_duration_ms: 3_000 })
    await startRollout(db, rollout.id, { by: operator })
    // Killed while the first batch's node is in its upgrade or its validation.
    await waitFor(async () => ['in_progress', 'validating'].includes((await listRolloutNodes(db, rollout.id))[0]?.status ?? '') || undefined, 'the first batch to start', 60_000, 20)
    doomed.kill('SIGKILL')
    expect((await doomed).signal).toBe('SIGKILL')
    expect((await requireRollout(db, rollout.id)).status).toBe('running')

    doomed = spawnNodeplane(['daemon', 'orchestrator'], { env })
    try {
      const done = await waitFor(async () => {
        const r = await requireRollout(db, rollout.id)
        return ['completed', 'failed', 'paused'].includes(r.status) ? r : undefined
      }, 'the rollout to finish on the second orchestrator', 120_000, 100)
      expect(done).toMatchObject({ status: 'completed', succeeded_nodes: 2, failed_nodes: 0 })
    } finally {
      doomed.kill('SIGTERM')
      await doomed
    }
    expect((await listRolloutNodes(db, rollout.id)).map((n) => [n.status, n.attempt_count])).toEqual([
      ['succeeded', 1],
      ['succeeded', 1],
    ])
    for (const id of nodes) {
      const upgrades = Number(((await db('agent_commands').where({ node_id: id, type: 'upgrade' }).count({ n: '*' }).first()) as { n: number | string }).n)
      expect(upgrades, `upgrade commands of node ${id}`).toBe(1)
      expect((await db('node_config_state').where({ node_id: id }).first('binary_version')) as { binary_version: string }).toEqual({ binary_version: '1.1.0' })
    }
  })
})
