/**
 * `failed_rollback` (spec: "A compensation failure gives upgrade_phase `failed_rollback`, node
 * state `degraded` and a critical incident"), on both databases. Real agents undo their own
 * failures, so here the test answers the nodes' agent commands itself:
 * - node A's upgrade completes, the node never heartbeats so health validation fails, and the
 *   control plane's revert to 1.0.0 fails at the agent with its own compensation failing too;
 * - node B's upgrade fails at the agent and the agent's rollback of it fails (no revert is tried:
 *   nothing says what the node runs now).
 * Each ends `failed` / `failed_rollback`, its node forced to `degraded` by the compensation
 * writer, with one critical incident; the rollout ends `failed`.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { recordCompletion, recordFailure, recordProgress } from '../../../src/agent-gateway/commands.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { fromJson } from '../../../src/db/dialect.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { writeConfigState } from '../../../src/provisioning/configure.js'
import { startRollout } from '../../../src/rollouts/control.js'
import { registerRolloutWorkflow } from '../../../src/rollouts/rollout-workflow.js'
import { listRolloutNodes } from '../../../src/rollouts/store.js'
import { createWorkflowRegistry, createWorkflowWorker, type WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, insertUser, setNodeState } from '../../helpers/fixtures.js'
import { binaryVersions, devnetRollout, eventPayloads, logger, untilStatus } from './harness.js'

interface UpgradeCommandRow {
  id: string
  node_id: string
  idempotency_key: string | null
}

function agentResult(version: string, phase: string, extra: Record<string, unknown> = {}) {
  return { version, previous_version: '1.0.0', phase, actions_done: ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode', 'InstallArtifact'], actions_skipped: [], compensated: [], ...extra }
}

describe.each(DIALECTS)('failed_rollback on %s', (dialect) => {
  let t: TestDatabase | undefined
  let worker: WorkflowWorker | undefined
  let agent: NodeJS.Timeout | undefined
  let answering = Promise.resolve()
  afterEach(async () => {
    clearInterval(agent)
    await answering
    await worker?.stop()
    await t?.destroy()
    agent = undefined
    worker = undefined
    t = undefined
  })

  it('an upgrade that cannot be undone, by the agent nor by the control plane: failed_rollback, node degraded, one critical incident', { timeout: 120_000 }, async () => {
    t = await createTestDatabase(dialect)
    const db = t.db
    const operatorId = await insertUser(db)
    const nodes: string[] = []
    for (let i = 0; i < 2; i++) {
      const node = await insertTestNode(db)
      await setNodeState(db, node.id, 'healthy')
      await writeConfigState(db, node.id, '1.0.0', null)
      nodes.push(node.id)
    }
    const [revertFails, agentFails] = nodes as [string, string]

    // The nodes' agent, as the test plays it (no heartbeats: node A fails its validation).
    const answer = async () => {
      const commands = (await db('agent_commands').where({ type: 'upgrade' }).whereIn('status', ['pending', 'sent']).select('id', 'node_id', 'idempotency_key')) as UpgradeCommandRow[]
      for (const c of commands) {
        const report = { id: c.id, nodeId: c.node_id }
        const revert = c.idempotency_key?.endsWith(':revert') ?? false
        await recordProgress(db, { ...report, phase: revert ? 'rollbacking' : 'mutating', message: 'InstallArtifact', stallCount: 0, stalled: false })
        if (c.node_id === revertFails && !revert) {
          await recordCompletion(db, { ...report, result: agentResult('1.1.0', 'starting', { actions_done: ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode', 'InstallArtifact', 'ReloadDaemon', 'StartNode'] }) })
        } else {
          const version = revert ? '1.0.0' : '1.1.0'
          const error = `upgrade failed at StartNode (the process exited) and compensating InstallArtifact: disk full; manual intervention needed`
          await recordFailure(db, { ...report, error, result: agentResult(version, 'failed_rollback', { compensation_error: 'InstallArtifact: disk full' }) })
        }
      }
    }
    agent = setInterval(() => {
      answering = answering.then(answer).catch(() => undefined)
    }, 50)

    const catalogue = await loadChainCatalogue(defaultConfigDir())
    const registry = registerRolloutWorkflow(createWorkflowRegistry(), { db, logger, catalogue: () => catalogue, now: () => new Date(), pollIntervalMs: 50, commandTimeoutMs: 30_000 })
    worker = createWorkflowWorker({ db, registry, logger, leaseMs: 30_000, pollIntervalMs: 50, concurrency: 2 })
    worker.start()

    const rollout = await devnetRollout(db, { operatorId }, { batch_size: 2, failure_threshold: 1, health_wait_duration_ms: 1_000 })
    await startRollout(db, rollout.id, { by: operatorId })
    const done = await untilStatus(db, rollout.id, ['failed', 'completed', 'paused'], 'failed', 60_000)
    expect(done).toMatchObject({ status: 'failed', failed_nodes: 2, succeeded_nodes: 0 })

    const byNode = new Map((await listRolloutNodes(db, rollout.id)).map((n) => [n.node_id, n]))
    expect(byNode.get(revertFails)).toMatchObject({ status: 'failed', upgrade_phase: 'failed_rollback' })
    expect(byNode.get(revertFails)?.error_message).toMatch(/^health validation failed: no heartbeat .*; going back to 1\.0\.0 failed: upgrade failed at StartNode/)
    expect(byNode.get(agentFails)).toMatchObject({ status: 'failed', upgrade_phase: 'failed_rollback' })
    expect(byNode.get(agentFails)?.error_message).toMatch(/^upgrade to 1\.1\.0 failed: upgrade failed at StartNode/)
    // Node A did get 1.1.0 (the agent said so) and could not be moved back; node B never left 1.0.0 on record.
    expect(await binaryVersions(db, [revertFails, agentFails])).toEqual(['1.1.0', '1.0.0'])
    // Exactly one revert was tried, for node A only.
    const reverts = (await db('agent_commands').where('idempotency_key', 'like', '%:revert').pluck('node_id')) as string[]
    expect(reverts).toEqual([revertFails])

    for (const id of nodes) {
      expect((await findNode(db, id))?.state).toBe('degraded')
      const moves = (await eventPayloads<{ dimension: string; writer: string; to: string }>(db, `events.node.${id}.health_changed`)).filter((e) => e.dimension === 'state')
      expect(moves.map((e) => `${e.writer}:${e.to}`)).toEqual(['upgrade:maintenance', 'compensation:degraded'])
      const incidents = (await db('incidents').where({ node_id: id }).select('category', 'severity', 'status', 'metadata')) as Array<{ category: string; severity: string; status: string; metadata: unknown }>
      expect(incidents).toHaveLength(1)
      expect(incidents[0]).toMatchObject({ category: 'migration_failed', severity: 'critical' })
      expect(incidents[0]?.status).not.toBe('resolved')
      expect(fromJson(incidents[0]?.metadata)).toMatchObject({ trigger: 'upgrade_failed_rollback', rollout_id: rollout.id, upgrade_phase: 'failed_rollback', source_version: '1.0.0', target_version: '1.1.0' })
    }
    const completed = await eventPayloads<{ status: string; upgrade_phase: string }>(db, `events.node.${revertFails}.upgrade_completed`)
    expect(completed.map((e) => [e.status, e.upgrade_phase])).toEqual([['failed', 'failed_rollback']])
    const notes = (await db('notifications').where({ user_id: operatorId }).orderBy('created_at').pluck('kind')) as string[]
    expect(notes).toEqual(['rollout_started', 'rollout_failed'])
  })
})
