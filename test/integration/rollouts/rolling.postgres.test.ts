/** Rolling rollouts on Postgres: see rolling.suite.ts. */
import { rollingRolloutsSuite } from './rolling.suite.js'

rollingRolloutsSuite(['postgres'])
