/**
 * Clock skew between daemons (issue 9): leases and timers are written with the writer's clock and
 * read with the reader's, so skew eats into their margins. docs/deploy.md documents the bound
 * (5 s); each test puts two daemons 5 s apart and shows nothing is taken over or counted twice,
 * and the workflow test shows the margin is real: past it, a live run is taken over.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { evaluationLeaseMs } from '../../../src/health/evaluator.js'
import { tryAcquireLease } from '../../../src/jobs/lease.js'
import { recordGatewayPresence } from '../../../src/agent-gateway/gateway-presence.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { createWorkflowRegistry, createWorkflowWorker, startWorkflow, type WorkflowFunction } from '../../../src/workflows/index.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { createEffectsTable, effects, recordEffect, silentLogger, testClock } from '../workflows/harness.js'

/** The documented bound between any two daemons' clocks. */
const SKEW_MS = 5_000
/** The defaults: WORKFLOW_LEASE 30 s renewed every 10 s; HEALTH_EVALUATION_INTERVAL 15 s. */
const LEASE_MS = 30_000
const RENEW_EVERY_MS = 10_000
const EVALUATION_INTERVAL_MS = 15_000

describe.each(DIALECTS)('clock skew between daemons on %s', (dialect) => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  /**
   * w1 runs a long step, renewing its lease every RENEW_EVERY_MS of its clock; just before each
   * renewal w2, whose clock is `skewMs` ahead, looks for work. Returns how many times the step ran.
   */
  async function longStepWithSkewedNeighbour(skewMs: number): Promise<{ ran: string[]; takenOver: boolean }> {
    database = await createTestDatabase(dialect)
    const db = database.db
    await createEffectsTable(db)
    const clock = testClock()
    const releases: Array<() => void> = []
    const wf: WorkflowFunction<unknown, string> = async (ctx) =>
      ctx.step('long', async () => {
        await recordEffect(db, ctx.runId, 'long')
        await new Promise<void>((r) => releases.push(r))
        return 'done'
      })
    const { run } = await startWorkflow(db, 'long', {}, { key: 'k', now: clock.now() })
    const registry = () => createWorkflowRegistry().register('long', wf as WorkflowFunction)
    // Renewals come every 40 ms of real time; the test clock moves RENEW_EVERY_MS between them.
    const w1 = createWorkflowWorker({ db, registry: registry(), logger: silentLogger, owner: 'w1', leaseMs: LEASE_MS, renewIntervalMs: 40, now: () => clock.now() })
    const w2 = createWorkflowWorker({
      db: dialect === 'postgres' ? database.connect() : db,
      registry: registry(),
      logger: silentLogger,
      owner: 'w2',
      leaseMs: LEASE_MS,
      now: () => new Date(clock.now().getTime() + skewMs),
    })
    const ticks: Array<Promise<unknown>> = [w1.tick()]
    await waitFor(async () => releases.length === 1, 'the step to start on w1')
    let takenOver = false
    for (let i = 0; i < 6 && !takenOver; i++) {
      clock.advance(RENEW_EVERY_MS)
      // w2 looks before w1's next renewal, the worst moment; a claim shows as its step starting.
      ticks.push(w2.tick())
      await new Promise((r) => setTimeout(r, 150))
      takenOver = releases.length > 1
      // w1 renews (every 40 ms of real time) before the clock moves again.
    }
    for (const release of releases) release()
    await Promise.all(ticks)
    return { ran: await effects(db, run.id), takenOver }
  }

  it(`a workflow run's lease holds against a worker ${SKEW_MS / 1000} s ahead: the step runs once`, async () => {
    const { ran, takenOver } = await longStepWithSkewedNeighbour(SKEW_MS)
    expect(takenOver).toBe(false)
    expect(ran).toEqual(['long'])
  })

  it('past the margin (a worker 25 s ahead of a 30 s lease renewed every 10 s) the live run is taken over', async () => {
    const { ran, takenOver } = await longStepWithSkewedNeighbour(LEASE_MS - RENEW_EVERY_MS + SKEW_MS)
    expect(takenOver).toBe(true)
    expect(ran.length).toBeGreaterThan(1)
  })

  it(`a periodic job's lease is not taken by a replica ${SKEW_MS / 1000} s ahead while it is held`, async () => {
    database = await createTestDatabase(dialect)
    // The health evaluation's lease with the default 15 s interval (45 s), renewed every cycle.
    const lease = evaluationLeaseMs(15_000)
    const t0 = new Date('2030-01-01T00:00:00Z')
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'a', lease, t0)).toBe(true)
    const ahead = (ms: number) => new Date(t0.getTime() + ms + SKEW_MS)
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'b', lease, ahead(0))).toBe(false)
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'b', lease, ahead(lease - SKEW_MS - 1_000))).toBe(false)
    // The holder renews on its own clock at its next cycle; the skewed replica still cannot take it.
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'a', lease, new Date(t0.getTime() + 15_000))).toBe(true)
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'b', lease, ahead(15_000 + lease - SKEW_MS - 1_000))).toBe(false)
    // A holder that stopped renewing (killed) loses it one lease after its last renewal.
    expect(await tryAcquireLease(database.db, 'health-evaluation', 'b', lease, new Date(t0.getTime() + 15_000 + lease))).toBe(true)
  })

  it(`two health-evaluators ${SKEW_MS / 1000} s apart count a missed heartbeat once per cycle`, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    const t0 = new Date('2030-01-01T00:00:00Z')
    const node = await insertTestNode(db, new Date(t0.getTime() - 600_000))
    await setNodeState(db, node.id, 'healthy')
    await db('nodes').where({ id: node.id }).update({ last_heartbeat: new Date(t0.getTime() - 120_000), state_changed_at: new Date(t0.getTime() - 600_000) })
    // A gateway receiving throughout: the timeouts are the node's (gateway-presence.ts).
    await recordGatewayPresence(db, 'gateway', new Date(t0.getTime() - 3_600_000), new Date(t0.getTime() + 3_600_000))
    const evaluate = (at: number) => evaluateHeartbeats(db, { now: new Date(t0.getTime() + at), heartbeatTimeoutMs: 60_000, intervalMs: EVALUATION_INTERVAL_MS, logger: silentLogger })
    const failures = async () => Number((await db('nodes').where({ id: node.id }).first('consecutive_failures')).consecutive_failures)

    await evaluate(0) // evaluator A
    await evaluate(SKEW_MS) // evaluator B, its clock ahead, in the same cycle
    expect(await failures()).toBe(1)
    await evaluate(EVALUATION_INTERVAL_MS) // A's next cycle
    await evaluate(EVALUATION_INTERVAL_MS + SKEW_MS)
    expect(await failures()).toBe(2)
    await evaluate(2 * EVALUATION_INTERVAL_MS)
    await evaluate(2 * EVALUATION_INTERVAL_MS + SKEW_MS)
    expect((await db('nodes').where({ id: node.id }).first('state')).state).toBe('down')
  })
})
