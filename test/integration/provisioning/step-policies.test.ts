/**
 * The provision workflow's steps run under the spec's activity classes (Limits: "Activity
 * timeouts and retries"): the wait for the agent is an agent wait (5 min, 20 attempts), and its
 * fixed deadline (AGENT_READY_WAIT) is not retried once it has passed. Retries wait on the
 * injected clock, so the test moves it instead of sleeping.
 */
import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { findNode } from '../../../src/nodes/node-store.js'
import type { Host, HostSpec, HostStatus, InfrastructureProvider } from '../../../src/provisioning/infrastructure/types.js'
import { requestProvision } from '../../../src/provisioning/triggers.js'
import type { LifecycleDeps } from '../../../src/provisioning/deps.js'
import { getRun, listSteps, type WorkflowStep, type WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import type { RunningGateway } from '../agent-gateway/harness.js'
import { testClock, type TestClock } from '../workflows/harness.js'
import { lifecycleSetting, startLifecycleWorker } from './harness.js'

/** A provider whose hosts never start an agent: nothing ever registers. */
class SilentProvider implements InfrastructureProvider {
  readonly name = 'silent'
  readonly destroyed: string[] = []
  async createHost(spec: HostSpec): Promise<Host> {
    return { host_id: `silent-${spec.hostKey}`, host_ip: '127.0.0.1', provider: this.name, instance_type: spec.instanceType, region: spec.region }
  }
  async destroyHost(hostId: string): Promise<void> {
    this.destroyed.push(hostId)
  }
  async hostStatus(): Promise<HostStatus> {
    return 'running'
  }
}

describe.each(DIALECTS)('provision step policies on %s', (dialect) => {
  let database: TestDatabase | undefined
  let gateway: RunningGateway | undefined
  let worker: WorkflowWorker | undefined
  afterEach(async () => {
    await worker?.stop()
    await gateway?.stop()
    await database?.destroy()
    worker = gateway = database = undefined
  })

  async function setup(clock: TestClock, fault?: (step: string) => void): Promise<{ db: Db; deps: LifecycleDeps; provider: SilentProvider }> {
    database = await createTestDatabase(dialect)
    const setting = await lifecycleSetting(database.db, { now: clock.now })
    gateway = setting.gateway
    const provider = new SilentProvider()
    const deps: LifecycleDeps = {
      ...setting.deps,
      providers: new Map([[provider.name, provider]]),
      ...(fault ? { injectFault: (step: string) => fault(step) } : {}),
    }
    return { db: database.db, deps, provider }
  }

  async function silentNode(db: Db): Promise<string> {
    const node = await insertTestNode(db)
    await db('nodes').where({ id: node.id }).update({ provider: 'silent', region: 'local', instance_type: 'small' })
    return node.id
  }

  async function waitStep(db: Db, runId: string): Promise<WorkflowStep | undefined> {
    return (await listSteps(db, runId)).find((s) => s.stepKey === 'wait-for-agent#0')
  }

  it('retries a failing wait for the agent 20 times (agent wait: 5 min per attempt), then fails the provisioning', { timeout: 120_000 }, async () => {
    const clock = testClock(Date.now())
    const { db, deps, provider } = await setup(clock, (step) => {
      if (step === 'wait-for-agent') throw new Error(`registration lookup failed ${crypto.randomUUID()}`)
    })
    const nodeId = await silentNode(db)
    const { run } = await requestProvision(db, nodeId, clock.now())
    worker = startLifecycleWorker(db, deps, 1)

    const attempts = new Set<number>()
    for (;;) {
      const step = await waitFor(async () => {
        const s = await waitStep(db, run.id)
        return s && (s.status === 'failed' || (s.status === 'retrying' && !attempts.has(s.attempt))) ? s : undefined
      }, 'the next attempt of wait-for-agent')
      attempts.add(step.attempt)
      expect(step.timeoutAt!.getTime() - step.startedAt!.getTime()).toBe(300_000)
      if (step.status === 'failed') break
      expect(step.attempt).toBeLessThan(20)
      // The backoff (1 s doubling to 60 s) passes on the injected clock.
      clock.set(step.nextAttemptAt!)
    }
    const failed = await waitFor(async () => {
      const r = await getRun(db, run.id)
      return r?.status === 'failed' ? r : undefined
    }, 'the provision run to fail')
    expect(failed.error).toMatch(/^step wait-for-agent#0 failed after 20 attempt\(s\): registration lookup failed/)
    expect([...attempts].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
    expect((await findNode(db, nodeId))?.state).toBe('failed')
    expect(provider.destroyed).toEqual([`silent-${nodeId}`])
  })

  it('fails at once, without spending its retries, when the agent ready wait has passed', { timeout: 60_000 }, async () => {
    const clock = testClock(Date.now())
    const { db, deps } = await setup(clock)
    const nodeId = await silentNode(db)
    const { run } = await requestProvision(db, nodeId, clock.now())
    worker = startLifecycleWorker(db, deps, 1)
    await waitFor(async () => (await waitStep(db, run.id))?.status === 'running', 'the wait for the agent to start')
    // The harness's AGENT_READY_WAIT is 30 s; the injected clock passes it, wall time does not.
    clock.advance(deps.agentReadyWaitMs)
    const failed = await waitFor(async () => {
      const r = await getRun(db, run.id)
      return r?.status === 'failed' ? r : undefined
    }, 'the provision run to fail')
    expect(failed.error).toBe(`step wait-for-agent#0 failed after 1 attempt(s): the agent of node ${nodeId} did not register within 30 s`)
    expect(await waitStep(db, run.id)).toMatchObject({ status: 'failed', attempt: 1 })
    expect((await findNode(db, nodeId))?.state).toBe('failed')
  })
})
