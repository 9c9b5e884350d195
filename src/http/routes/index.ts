/** Every control-plane route the api-server serves under /api/v1, for createApiApp({ routes }). */
import type { ArtifactSource } from '../../artifacts/resolve.js'
import type { SignInBinding } from '../../auth/sign-in-message.js'
import type { ChainSource } from '../../config/chain-source.js'
import type { Db } from '../../db/knex.js'
import type { Logger } from '../../log.js'
import type { PaymentClient } from '../../payments/client.js'
import type { MasterKey } from '../../secrets/master-key.js'
import type { ApiRoute } from '../route.js'
import { adminNodeRoutes } from './admin-nodes.js'
import { adminUserRoutes } from './admin-users.js'
import { adminWorkflowRoutes } from './admin-workflows.js'
import { apiKeyRoutes } from './api-keys.js'
import { artifactRoutes } from './artifacts.js'
import { chainRoutes } from './chains.js'
import { cryptoRoutes } from './crypto.js'
import { hostRoutes, type HostRouteDeps } from './hosts.js'
import { incidentRoutes } from './incidents.js'
import { inputRoutes } from './inputs.js'
import { meRoutes } from './me.js'
import { nodeKeyRoutes } from './node-keys.js'
import { nodeRoutes } from './nodes.js'
import { notificationRoutes } from './notifications.js'
import { paymentRoutes } from './payments.js'
import { rolloutRoutes } from './rollouts.js'
import { rpcUsageRoutes } from './rpc-usage.js'
import { subscriptionRoutes } from './subscriptions.js'
import { uptimeRoutes } from './uptime.js'
import { walletRoutes } from './wallet.js'

export interface ControlPlaneRouteDeps {
  db: Db
  logger?: Logger
  /** Injected clock (tests move it); the wall clock otherwise. */
  now?: () => Date
  /** The key hierarchy's master key; absent until `nodeplane secrets init` (key export then answers 503). */
  masterKey?: MasterKey
  /** The chain catalogue (GET /chains, provisioning inputs), asked per request; the package's own `chains/` when absent. */
  chains?: ChainSource
  /** The payment service client (mTLS gRPC); absent when not configured (payment routes answer 503). */
  payments?: PaymentClient
  /** ARTIFACT_ALLOWED_SOURCES (rollout creation; docs/artifacts.md); none when absent. */
  artifactSources?: readonly string[]
  /** The artifact store and release public keys (rollouts naming stored artifacts). */
  artifactStore?: ArtifactSource
  /** SSH to the fleet's hosts and their key store (`POST /hosts` answers 503 without it). */
  hostFleet?: HostRouteDeps['hostFleet']
  /** AUTH_SIWE_*: the domain, URI and chain wallet registration messages are bound to. */
  signInBinding?: SignInBinding
  /** Where customers reach the rpc-gateway (RPC_PUBLIC_URL): nodes' `endpoints`; default http://127.0.0.1:8545. */
  rpcPublicUrl?: string
  /** MIGRATION_COOLDOWN (operator migrations through the admin API); the spec's 1 h when absent. */
  migrationCooldownMs?: number
}

export function controlPlaneRoutes(deps: ControlPlaneRouteDeps): ApiRoute[] {
  return [...meRoutes(deps), ...apiKeyRoutes(deps), ...adminUserRoutes(deps), ...adminNodeRoutes(deps), ...adminWorkflowRoutes(deps), ...walletRoutes(deps), ...nodeRoutes(deps), ...cryptoRoutes(deps), ...nodeKeyRoutes(deps), ...inputRoutes(deps), ...subscriptionRoutes(deps), ...chainRoutes(deps), ...paymentRoutes(deps), ...notificationRoutes(deps), ...uptimeRoutes(deps), ...rpcUsageRoutes(deps), ...incidentRoutes(deps), ...rolloutRoutes(deps), ...artifactRoutes(deps), ...hostRoutes(deps)]
}
