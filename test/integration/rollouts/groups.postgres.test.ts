/** Rollout groups on Postgres: see groups.suite.ts. */
import { rolloutGroupsSuite } from './groups.suite.js'

rolloutGroupsSuite(['postgres'])
