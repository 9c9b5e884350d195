/** Issue 19's fleet journey on Postgres: see fleet-journey.suite.ts. */
import { fleetJourneySuite } from './fleet-journey.suite.js'

fleetJourneySuite('postgres')
