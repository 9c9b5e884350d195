/**
 * Child process of the kill -9 "between steps" test: runs a workflow worker on DATABASE_URL
 * whose run completes (and journals) step 1, then prints "between" and never starts step 2.
 * The test kills it there.
 */
import { createDatabase } from '../../../src/db/knex.js'
import { createWorkflowRegistry, createWorkflowWorker } from '../../../src/workflows/index.js'
import { crashBetweenWorkflow } from './crash-between-workflow.js'
import { silentLogger } from './harness.js'

const url = process.env.DATABASE_URL
if (!url) throw new Error('DATABASE_URL is required')
const db = createDatabase(url)
const registry = createWorkflowRegistry().register(
  'crashy-between',
  crashBetweenWorkflow(db, async () => {
    process.stdout.write('between\n')
    return new Promise<void>(() => undefined)
  }),
)
const worker = createWorkflowWorker({ db, registry, logger: silentLogger, owner: 'doomed', leaseMs: 60_000, pollIntervalMs: 50 })
worker.start()
