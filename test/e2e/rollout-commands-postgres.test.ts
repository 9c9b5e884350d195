/** The rollout commands against `nodeplane up` on Postgres: see rollout-commands.suite.ts. */
import { rolloutCommandsSuite } from './rollout-commands.suite.js'

rolloutCommandsSuite('postgres')
