/** The litecoin journey against `nodeplane up` on Postgres: see litecoin-journey.suite.ts. */
import { litecoinJourneySuite } from './litecoin-journey.suite.js'

litecoinJourneySuite('postgres')
