/** Rollout signals on SQLite: see signals.suite.ts. */
import { rolloutSignalsSuite } from './signals.suite.js'

rolloutSignalsSuite(['sqlite'])
