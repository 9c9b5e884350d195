/** The ethereum-anvil journey against `nodeplane up` on Postgres: see anvil-journey.suite.ts. */
import { anvilJourneySuite } from './anvil-journey.suite.js'

anvilJourneySuite('postgres')
