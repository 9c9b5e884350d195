/** The rollout commands against `nodeplane up` on SQLite: see rollout-commands.suite.ts. */
import { rolloutCommandsSuite } from './rollout-commands.suite.js'

rolloutCommandsSuite('sqlite')
