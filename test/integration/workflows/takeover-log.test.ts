/**
 * The orchestrator's trail (issue 22, item 5) on both databases: a worker that takes over a run
 * another worker was executing when it died logs which run, from whom and after how long; a new run,
 * which no worker held, is claimed without that line.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createWorkflowRegistry, createWorkflowWorker, getRun, startWorkflow, type WorkflowFunction } from '../../../src/workflows/index.js'
import { claimRuns } from '../../../src/workflows/store.js'
import { capturingLogger } from '../../fixtures/agent/helpers.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { testClock } from './harness.js'

const LEASE = 30_000
const TAKEOVER = 'took over an interrupted workflow run'

describe.each(DIALECTS)('workflow takeover log on %s', (dialect) => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  it('names the run, the worker that held it and how long it was interrupted; a fresh run is claimed silently', async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    const clock = testClock()
    const provision: WorkflowFunction<{ n: number }, number> = async (ctx, input) => ctx.step('only', async () => input.n + 1)
    const registry = createWorkflowRegistry()
    registry.register('provision', provision as WorkflowFunction)

    const { run: interrupted } = await startWorkflow(db, 'provision', { n: 1 }, { key: 'node-a', now: clock.now() })
    // orchestrator-1 claims it and is killed before it renews its lease or writes a step.
    const claimed = await claimRuns(db, { owner: 'orchestrator-1', names: ['provision'], limit: 1, leaseMs: LEASE, now: clock.now() })
    expect(claimed.map((r) => [r.id, r.takenOverFrom])).toEqual([[interrupted.id, null]])
    const { run: fresh } = await startWorkflow(db, 'provision', { n: 2 }, { key: 'node-b', now: clock.now() })

    const { logger, lines } = capturingLogger()
    const worker = createWorkflowWorker({ db, registry, logger, owner: 'orchestrator-2', leaseMs: LEASE, now: clock.now })
    // Within the dead worker's lease only the fresh run is claimed, and without the line.
    clock.advance(LEASE - 1)
    expect((await worker.tick()).map((r) => r.runId)).toEqual([fresh.id])
    expect(lines.filter((l) => l.msg === TAKEOVER)).toEqual([])

    clock.advance(6_000)
    expect(await worker.tick()).toEqual([{ runId: interrupted.id, outcome: 'completed' }])
    expect((await getRun(db, interrupted.id))?.result).toBe(2)
    expect(lines.filter((l) => l.msg === TAKEOVER)).toEqual([
      expect.objectContaining({
        level: 40,
        workflowId: interrupted.id,
        workflow: 'provision',
        workflow_key: 'node-a',
        previous_owner: 'orchestrator-1',
        owner: 'orchestrator-2',
        lease_expired_at: new Date(Date.parse('2030-01-01T00:00:00Z') + LEASE).toISOString(),
        interrupted_ms: LEASE + 5_999,
      }),
    ])
    await worker.stop()
  })
})
