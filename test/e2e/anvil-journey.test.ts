/** The ethereum-anvil journey against `nodeplane up` on SQLite: see anvil-journey.suite.ts. */
import { anvilJourneySuite } from './anvil-journey.suite.js'

anvilJourneySuite('sqlite')
