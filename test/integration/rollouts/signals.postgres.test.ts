/** Rollout signals on Postgres: see signals.suite.ts. */
import { rolloutSignalsSuite } from './signals.suite.js'

rolloutSignalsSuite(['postgres'])
