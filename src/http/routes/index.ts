/** Every control-plane route the api-server serves under /api/v1, for createApiApp({ routes }). */
import type { Db } from '../../db/knex.js'
import type { Logger } from '../../log.js'
import type { ApiRoute } from '../route.js'
import { apiKeyRoutes } from './api-keys.js'
import { meRoutes } from './me.js'
import { walletRoutes } from './wallet.js'

export interface ControlPlaneRouteDeps {
  db: Db
  logger?: Logger
  /** Injected clock (tests move it); the wall clock otherwise. */
  now?: () => Date
}

export function controlPlaneRoutes(deps: ControlPlaneRouteDeps): ApiRoute[] {
  return [...meRoutes(deps), ...apiKeyRoutes(deps), ...walletRoutes(deps)]
}
