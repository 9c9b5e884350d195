/** Rollout groups on SQLite: see groups.suite.ts. */
import { rolloutGroupsSuite } from './groups.suite.js'

rolloutGroupsSuite(['sqlite'])
