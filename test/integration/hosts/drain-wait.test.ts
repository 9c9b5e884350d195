/**
 * A drain that waits on a node that cannot move yet (docs/infrastructure.md, "Drain"), on both
 * databases, with the real host-drain workflow on a workflow worker: however long it waits, its
 * journal stays a few steps (it looks from inside one step, not a step and a durable timer per
 * look), and once the node is gone it completes; an orchestrator killed (SIGKILL) while the drain
 * waits leaves it to the next one, which completes it. No node is moved here, so no host is
 * reached; host-drain.test.ts moves real nodes.
 */
import { execa } from 'execa'
import crypto from 'node:crypto'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { moveHost } from '../../../src/hosts/service.js'
import { insertHost } from '../../../src/hosts/store.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { HOST_DRAIN_WORKFLOW } from '../../../src/provisioning/workflow-names.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { untilRunFinished } from '../provisioning/harness.js'
import { DRAIN_POLL_MS, startDrainWorker } from './drain-worker-deps.js'

const CAPACITY = { cpu: 8, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 }
const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'drain-worker.ts')

describe.each(DIALECTS)('a waiting host drain on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  const stops: Array<() => Promise<unknown>> = []

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop()
    await t?.destroy()
  })

  /** A draining host with one syncing node on it (it cannot migrate), and the drain's run. */
  async function drainWaitingOnASyncingNode(name: string): Promise<{ hostId: string; nodeId: string; drainId: string; runId: string }> {
    const host = await insertHost(db, { id: crypto.randomUUID(), name, address: '10.213.252.2', port: 22, user: 'root', region: 'test-1', rootDir: '/srv/np', capacity: CAPACITY, labels: {}, hostKeyFingerprint: `SHA256:${'A'.repeat(43)}`, now: new Date() })
    const node = await insertNode(db, { subscription_id: await insertSubscription(db, await insertUser(db)), chain_profile_id: 'devnet', node_type: 'full', provider: 'ssh', region: 'test-1', instance_type: 'ssh.small' })
    await setNodeState(db, node.id, 'syncing')
    await db('nodes').where({ id: node.id }).update({ host_id: `${host.id}/${node.id}` })
    expect((await moveHost({ db }, host.name, 'drain')).state).toBe('draining')
    const drain = (await db('host_drains').where({ host_id: host.id }).first('id')) as { id: string }
    const run = (await db('workflow_runs').where({ workflow_name: HOST_DRAIN_WORKFLOW, workflow_key: drain.id }).first('id')) as { id: string }
    return { hostId: host.id, nodeId: node.id, drainId: drain.id, runId: run.id }
  }
  const untilWaiting = (drainId: string, nodeId: string) =>
    waitFor(async () => (await db('host_drains').where({ id: drainId }).first('activity')).activity === `waiting: node ${nodeId} is syncing`, 'the drain to wait on the syncing node', 15_000, 50)
  const stepsOf = async (runId: string) => (await db('workflow_steps').where({ run_id: runId }).select('step_key', 'attempt')) as Array<{ step_key: string; attempt: number }>

  it('journals a bounded number of steps however many times it looks at a node that cannot move, and completes once the node is gone', async () => {
    const started = await startDrainWorker(db, 'orchestrator-1')
    stops.push(() => started.stop())
    const { hostId, nodeId, drainId, runId } = await drainWaitingOnASyncingNode('wait-1')
    await untilWaiting(drainId, nodeId)

    // Sixty drain poll intervals and more pass.
    await new Promise((resolve) => setTimeout(resolve, 60 * DRAIN_POLL_MS))
    const waited = await stepsOf(runId)
    // next-node#0 and the wait step (a look per step before: sixty next-node steps and sixty timers).
    expect(waited.length, JSON.stringify(waited)).toBeLessThanOrEqual(3)
    expect(waited.map((s) => s.step_key)).toContain('wait-for-nodes#0')
    expect((await db('hosts').where({ id: hostId }).first('state')).state).toBe('draining')

    // The node goes away (terminated): the next look sees an empty host, the drain completes.
    await setNodeState(db, nodeId, 'terminated')
    const finished = await untilRunFinished(db, runId, 15_000)
    expect(finished).toMatchObject({ status: 'completed', result: { status: 'completed', nodes_moved: 0 } })
    expect((await db('hosts').where({ id: hostId }).first('state')).state).toBe('cordoned')
    expect((await stepsOf(runId)).length).toBeLessThanOrEqual(6)
  })

  it('an orchestrator killed (SIGKILL) while the drain waits: the next one resumes the drain in its wait and completes it', async () => {
    const { hostId, nodeId, drainId, runId } = await drainWaitingOnASyncingNode('crash-1')
    const child = execa(process.execPath, ['--import', 'tsx', WORKER, t.url], { reject: false })
    stops.push(async () => {
      child.kill('SIGKILL')
      await child
    })
    await untilWaiting(drainId, nodeId)
    expect((await db('workflow_runs').where({ id: runId }).first('lease_owner')).lease_owner).toBe('doomed')
    child.kill('SIGKILL')
    await child

    const next = await startDrainWorker(db, 'orchestrator-2')
    stops.push(() => next.stop())
    // The wait step is run again by the new orchestrator (its second attempt), not a new round.
    await waitFor(async () => (await stepsOf(runId)).some((s) => s.step_key === 'wait-for-nodes#0' && Number(s.attempt) === 2), 'the new orchestrator to resume the wait', 15_000, 50)
    await setNodeState(db, nodeId, 'terminated')
    const finished = await untilRunFinished(db, runId, 15_000)
    expect(finished).toMatchObject({ status: 'completed', result: { status: 'completed', nodes_moved: 0 } })
    expect((await db('hosts').where({ id: hostId }).first('state')).state).toBe('cordoned')
    expect((await db('host_drains').where({ id: drainId }).first('status')).status).toBe('completed')
    expect((await stepsOf(runId)).filter((s) => s.step_key.startsWith('next-node')).length).toBeLessThanOrEqual(2)
  })
})
