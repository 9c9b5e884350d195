/**
 * The `auth-server` daemon (AUTH_SERVER_PORT, 8081): the identity-provider webhook, the legacy
 * wallet sign-in, token refresh and logout, and the key set of the tokens it issues
 * (docs/auth.md, "Auth server"). It needs only the control-plane database: no event bus.
 */
import { createAuthRateLimiter, purgeFullBuckets } from '../src/auth/auth-rate-limit.js'
import { purgeExpiredNonces } from '../src/auth/nonces.js'
import { purgeExpiredRefreshTokens } from '../src/auth/refresh-tokens.js'
import { defaultSigningKeyFile, loadOrCreateSigningKey } from '../src/auth/signing-key.js'
import { createTokenIssuer, type TokenIssuer } from '../src/auth/token-issuer.js'
import { parseWebhookSecret } from '../src/auth/webhooks.js'
import type { AuthServerConfig } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import { createApiApp } from '../src/http/app.js'
import { authServerRoutes, idpWebhookEnabled, walletSignInEnabled } from '../src/http/auth-routes/index.js'
import { startHttpServer } from '../src/http/server.js'
import { schedulePeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { createMetrics } from '../src/metrics.js'

export type AuthServerSettings = Pick<
  AuthServerConfig,
  | 'NODEPLANE_DATA_DIR'
  | 'HTTP_HOST'
  | 'HTTP_BODY_LIMIT_BYTES'
  | 'HTTP_TRUST_PROXY'
  | 'HTTP_MAX_IPS_COUNT'
  | 'AUTH_SERVER_PORT'
  | 'AUTH_PROVIDER'
  | 'AUTH_IDP_WEBHOOK_SIGNING_SECRET'
  | 'AUTH_RATE_LIMIT_PER_MINUTE'
  | 'AUTH_ACCESS_TOKEN_TTL'
  | 'AUTH_REFRESH_TOKEN_TTL'
  | 'AUTH_SIGNING_KEY_FILE'
  | 'AUTH_SIWE_DOMAIN'
  | 'AUTH_SIWE_URI'
  | 'AUTH_SIWE_CHAIN_ID'
  | 'AUTH_SIWE_SOLANA_CHAIN'
>

export interface AuthServerDeps {
  db: Db
  logger: Logger
  /** The clock every rule reads (nonce and token lifetimes, rate-limit windows, webhook tolerance). */
  now?: () => Date
  /** Under `nodeplane up`: no identity provider is the expected laptop setup, said at info, not warn. */
  localStack?: boolean
}

export interface RunningAuthServer {
  url: string
  stop(): Promise<void>
}

/** Refresh-token rows are kept this long past expiry, so a late replay still trips the reuse defence. */
const EXPIRED_REFRESH_TOKEN_RETENTION_MS = 7 * 24 * 3_600_000

export async function startAuthServer(config: AuthServerSettings, deps: AuthServerDeps): Promise<RunningAuthServer> {
  const { db, logger } = deps
  const now = deps.now ?? (() => new Date())
  const mode = config.AUTH_PROVIDER

  let issuer: TokenIssuer | undefined
  if (walletSignInEnabled(mode)) {
    const key = await loadOrCreateSigningKey(config.AUTH_SIGNING_KEY_FILE ?? defaultSigningKeyFile(config.NODEPLANE_DATA_DIR), logger)
    issuer = createTokenIssuer({ key, accessTokenTtlMs: config.AUTH_ACCESS_TOKEN_TTL })
  }
  let webhookKey: Buffer | undefined
  if (idpWebhookEnabled(mode)) {
    if (config.AUTH_IDP_WEBHOOK_SIGNING_SECRET) webhookKey = parseWebhookSecret(config.AUTH_IDP_WEBHOOK_SIGNING_SECRET)
    else logger[deps.localStack ? 'info' : 'warn']({ mode }, 'AUTH_IDP_WEBHOOK_SIGNING_SECRET is not set: POST /webhooks/idp is not served, so users created at the identity provider are not created here')
  }

  const limiter = createAuthRateLimiter({ db, limitPerMinute: config.AUTH_RATE_LIMIT_PER_MINUTE, logger, now })
  const routes = authServerRoutes({
    db,
    mode,
    issuer,
    limiter,
    webhookKey,
    refreshTokenTtlMs: config.AUTH_REFRESH_TOKEN_TTL,
    bodyLimitBytes: config.HTTP_BODY_LIMIT_BYTES,
    now,
    binding: { domain: config.AUTH_SIWE_DOMAIN, uri: config.AUTH_SIWE_URI, ethereumChainId: config.AUTH_SIWE_CHAIN_ID, solanaChain: config.AUTH_SIWE_SOLANA_CHAIN },
  })
  const app = createApiApp({
    db,
    logger,
    metrics: createMetrics('auth-server'),
    bodyLimitBytes: config.HTTP_BODY_LIMIT_BYTES,
    routes,
    trustProxy: config.HTTP_TRUST_PROXY,
    maxIpsCount: config.HTTP_MAX_IPS_COUNT,
    info: {
      title: 'nodeplane auth server',
      version: '1',
      description: 'Identity-provider webhook, legacy wallet sign-in, token refresh. Errors are `{ "error", "details" }`.',
    },
  })

  const housekeeping = schedulePeriodicJob({
    name: 'auth-housekeeping',
    cronTime: '30 * * * * *',
    leaseMs: 90_000,
    db,
    logger,
    now,
    run: async (at) => {
      const nonces = await purgeExpiredNonces(db, at)
      const windows = await purgeFullBuckets(db, at)
      const tokens = await purgeExpiredRefreshTokens(db, at, EXPIRED_REFRESH_TOKEN_RETENTION_MS)
      if (nonces + windows + tokens > 0) logger.debug({ nonces, rate_limit_buckets: windows, refresh_tokens: tokens }, 'auth housekeeping')
    },
  })

  const server = await startHttpServer(app, { host: config.HTTP_HOST, port: config.AUTH_SERVER_PORT }).catch(async (err: NodeJS.ErrnoException) => {
    await housekeeping.stop()
    if (err.code !== 'EADDRINUSE' && err.code !== 'EACCES') throw err
    const why = err.code === 'EADDRINUSE' ? 'is already in use' : 'needs privileges this user lacks'
    throw new ConfigError([`AUTH_SERVER_PORT: port ${config.AUTH_SERVER_PORT} on ${config.HTTP_HOST} ${why}; stop whatever listens there or choose another port`])
  })
  logger.info(
    { url: server.url, mode, walletSignIn: issuer !== undefined, idpWebhook: webhookKey !== undefined, signingKeyId: issuer?.kid },
    'auth server listening',
  )
  return {
    url: server.url,
    async stop() {
      await server.close()
      await housekeeping.stop()
    },
  }
}
