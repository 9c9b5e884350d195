/** The `api-server` daemon: the public REST API on API_SERVER_PORT (8080). */
import { localBlobStore } from '../src/artifacts/blob-store.js'
import type { ReleasePublicKey } from '../src/artifacts/release-keys.js'
import { createApiRateLimiter } from '../src/auth/api-rate-limit.js'
import { authenticatorFromSettings, type AuthenticationSettings } from '../src/auth/authenticator.js'
import { DEFAULT_SIGN_IN_BINDING } from '../src/auth/sign-in-message.js'
import type { KeySetOptions } from '../src/auth/idp-tokens.js'
import type { ChainSource } from '../src/config/chain-source.js'
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import type { EventBus } from '../src/events/bus.js'
import { createApiApp } from '../src/http/app.js'
import type { ComponentCheck } from '../src/http/readiness.js'
import { controlPlaneRoutes } from '../src/http/routes/index.js'
import { openHostFleet, type HostFleetSettings } from '../src/hosts/fleet.js'
import { rpcPublicUrl } from '../src/rpc-gateway/endpoints.js'
import { startHttpServer } from '../src/http/server.js'
import type { Logger } from '../src/log.js'
import { createMetrics } from '../src/metrics.js'
import type { PaymentClient } from '../src/payments/client.js'
import type { MasterKey } from '../src/secrets/master-key.js'

/**
 * What the daemon reads from its configuration (apiServerEnv or upEnv, parsed). The auth fields
 * are optional so a bare settings object still starts a server with the documented defaults.
 */
export interface ApiServerSettings extends AuthenticationSettings, Partial<Omit<HostFleetSettings, 'NODEPLANE_DATA_DIR'>> {
  API_SERVER_PORT: number
  HTTP_HOST: string
  HTTP_BODY_LIMIT_BYTES: number
  /** Behind a reverse proxy: the client address (failed-authentication throttle, logs) from X-Forwarded-For. */
  HTTP_TRUST_PROXY?: boolean
  HTTP_MAX_IPS_COUNT?: number
  API_RATE_LIMIT_PER_MINUTE?: number
  /** Rollout artifact sources beyond public hosts (docs/artifacts.md); none when absent. */
  ARTIFACT_ALLOWED_SOURCES?: readonly string[]
  /** The release public keys a stored artifact must be signed by (docs/artifacts.md). */
  ARTIFACT_RELEASE_PUBLIC_KEYS?: readonly ReleasePublicKey[]
  /** Holds the artifact store (`<data dir>/artifacts`); without it rollouts cannot name stored artifacts. */
  NODEPLANE_DATA_DIR?: string
  /** Where customers reach the rpc-gateway (nodes' `endpoints`); default http://127.0.0.1:$RPC_GATEWAY_PORT. */
  RPC_PUBLIC_URL?: string | undefined
  RPC_GATEWAY_PORT?: number
  /** Between migration attempts of a node (operator migrations through the admin API); the spec's 1 h when absent. */
  MIGRATION_COOLDOWN?: number
}

export interface ApiServerDeps {
  db: Db
  bus: EventBus
  logger: Logger
  /** Under `nodeplane up`: no identity provider is the expected laptop setup, said at info, not warn. */
  localStack?: boolean
  /** Injected clock for tests; the wall clock otherwise. */
  now?: () => Date
  /** Key set caching of the token verifiers (tests shorten the refetch cooldown). */
  keySet?: KeySetOptions
  /** The key hierarchy's master key; without it key export and secret inputs answer 503. */
  masterKey?: MasterKey
  /** The chain catalogue (GET /chains; inputs are validated against it); default: the package's own chains. */
  chains?: ChainSource
  /** The payment service client; without it the payment endpoints answer 503. */
  payments?: PaymentClient
  /** /readyz components besides the database and bus (`secrets` when the master key is in Vault). */
  readinessComponents?: Record<string, ComponentCheck>
}

export interface RunningServer {
  url: string
  stop(): Promise<void>
}

export async function startApiServer(settings: ApiServerSettings, deps: ApiServerDeps): Promise<RunningServer> {
  const metrics = createMetrics('api-server')
  const now = deps.now ?? (() => new Date())
  const { authenticate, provider, idp } = authenticatorFromSettings(settings, { db: deps.db, now, logger: deps.logger, ...(deps.keySet ? { keySet: deps.keySet } : {}) })
  if (provider !== 'siwe' && !idp.configured) {
    deps.logger[deps.localStack ? 'info' : 'warn']({ AUTH_PROVIDER: provider }, 'AUTH_IDP_JWKS_URL is not set: identity-provider tokens are refused; API keys still work')
  } else if (provider !== 'siwe' && (settings.AUTH_IDP_AUTHORIZED_PARTY ?? []).length === 0) {
    deps.logger[deps.localStack ? 'info' : 'warn']({ AUTH_PROVIDER: provider }, 'AUTH_IDP_AUTHORIZED_PARTY is empty: no identity-provider token can pass the azp check')
  }
  // Adding hosts (POST /hosts) connects to them over SSH and keeps their keys under the data directory.
  const hostFleet = settings.NODEPLANE_DATA_DIR ? openHostFleet({ ...settings, NODEPLANE_DATA_DIR: settings.NODEPLANE_DATA_DIR }) : undefined
  const limiter = createApiRateLimiter({ perMinute: settings.API_RATE_LIMIT_PER_MINUTE, now: () => now().getTime() })
  const app = createApiApp({
    db: deps.db,
    bus: deps.bus,
    logger: deps.logger,
    metrics,
    bodyLimitBytes: settings.HTTP_BODY_LIMIT_BYTES,
    trustProxy: settings.HTTP_TRUST_PROXY ?? false,
    ...(settings.HTTP_MAX_IPS_COUNT !== undefined ? { maxIpsCount: settings.HTTP_MAX_IPS_COUNT } : {}),
    authenticate,
    rateLimit: limiter.rateLimit,
    ...(deps.readinessComponents ? { readinessComponents: deps.readinessComponents } : {}),
    routes: controlPlaneRoutes({
      db: deps.db,
      logger: deps.logger,
      now,
      signInBinding: {
        domain: settings.AUTH_SIWE_DOMAIN ?? DEFAULT_SIGN_IN_BINDING.domain,
        uri: settings.AUTH_SIWE_URI ?? DEFAULT_SIGN_IN_BINDING.uri,
        ethereumChainId: settings.AUTH_SIWE_CHAIN_ID ?? DEFAULT_SIGN_IN_BINDING.ethereumChainId,
        solanaChain: settings.AUTH_SIWE_SOLANA_CHAIN ?? DEFAULT_SIGN_IN_BINDING.solanaChain,
      },
      ...(deps.masterKey ? { masterKey: deps.masterKey } : {}),
      ...(deps.chains ? { chains: deps.chains } : {}),
      ...(deps.payments ? { payments: deps.payments } : {}),
      artifactSources: settings.ARTIFACT_ALLOWED_SOURCES ?? [],
      ...(hostFleet ? { hostFleet } : {}),
      rpcPublicUrl: rpcPublicUrl(settings),
      ...(settings.MIGRATION_COOLDOWN !== undefined ? { migrationCooldownMs: settings.MIGRATION_COOLDOWN } : {}),
      ...(settings.NODEPLANE_DATA_DIR ? { artifactStore: { blobs: localBlobStore(settings.NODEPLANE_DATA_DIR), releaseKeys: settings.ARTIFACT_RELEASE_PUBLIC_KEYS ?? [] } } : {}),
    }),
  })
  const server = await startHttpServer(app, { host: settings.HTTP_HOST, port: settings.API_SERVER_PORT }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EADDRINUSE' && err.code !== 'EACCES') throw err
    const why = err.code === 'EADDRINUSE' ? 'is already in use' : 'needs privileges this user lacks'
    throw new ConfigError([`API_SERVER_PORT: port ${settings.API_SERVER_PORT} on ${settings.HTTP_HOST} ${why}; stop whatever listens there or choose another port`])
  })
  // The remote key sets hold no sockets or timers between fetches (jose fetches on demand with a
  // per-fetch deadline), so closing the HTTP server is all there is to stop.
  return {
    url: server.url,
    stop: async () => {
      await server.close()
      await hostFleet?.close()
    },
  }
}
