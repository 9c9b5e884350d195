/** Issue 19's fleet journey on SQLite: see fleet-journey.suite.ts. */
import { fleetJourneySuite } from './fleet-journey.suite.js'

fleetJourneySuite('sqlite')
