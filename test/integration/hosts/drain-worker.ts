/**
 * Child process of drain-wait.test.ts's crash test: an orchestrator running the lifecycle
 * workflows on `drain-worker.ts <database url>`; prints "started", then works until killed.
 */
import { createDatabase } from '../../../src/db/knex.js'
import { startDrainWorker } from './drain-worker-deps.js'

const db = createDatabase(process.argv[2] as string)
await startDrainWorker(db, 'doomed')
process.stdout.write('started\n')
