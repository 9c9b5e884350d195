/** Rolling rollouts on SQLite: see rolling.suite.ts. */
import { rollingRolloutsSuite } from './rolling.suite.js'

rollingRolloutsSuite(['sqlite'])
