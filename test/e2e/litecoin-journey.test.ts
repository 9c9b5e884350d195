/** The litecoin journey against `nodeplane up` on SQLite: see litecoin-journey.suite.ts. */
import { litecoinJourneySuite } from './litecoin-journey.suite.js'

litecoinJourneySuite('sqlite')
