/**
 * Child process of the kill -9 test: runs a workflow worker on DATABASE_URL whose second
 * step records its effect, prints "blocked" and never returns. The test kills it there.
 */
import { createDatabase } from '../../../src/db/knex.js'
import { createWorkflowRegistry, createWorkflowWorker } from '../../../src/workflows/index.js'
import { crashWorkflow } from './crash-workflow.js'
import { recordEffect, silentLogger } from './harness.js'

const url = process.env.DATABASE_URL
if (!url) throw new Error('DATABASE_URL is required')
const db = createDatabase(url)
const registry = createWorkflowRegistry().register(
  'crashy',
  crashWorkflow(db, {
    async second(runId) {
      await recordEffect(db, runId, 'second')
      process.stdout.write('blocked\n')
      return new Promise<string>(() => undefined)
    },
  }),
)
const worker = createWorkflowWorker({ db, registry, logger: silentLogger, owner: 'doomed', leaseMs: 60_000, pollIntervalMs: 50 })
worker.start()
