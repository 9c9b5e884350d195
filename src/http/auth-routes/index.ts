/**
 * The auth server's routes, by mode (AUTH_PROVIDER; docs/auth.md, "Auth server"):
 *
 * | route                        | idp | both | siwe | rate limited |
 * |------------------------------|-----|------|------|--------------|
 * | GET /.well-known/jwks.json   |     |  x   |  x   |              |
 * | GET /auth/nonce              |     |  x   |  x   |      x       |
 * | POST /auth/verify            |     |  x   |  x   |      x       |
 * | POST /auth/refresh           |     |  x   |  x   |      x       |
 * | POST /auth/logout            |  x  |  x   |  x   |      x       |
 * | POST /webhooks/idp (*)       |  x  |  x   |      |              |
 *
 * (*) only when AUTH_IDP_WEBHOOK_SIGNING_SECRET is set. A route not mounted answers 404. Logout
 * stays in every mode so tokens from an earlier `both`/`siwe` period can always be revoked.
 */
import type { AuthRateLimiter } from '../../auth/auth-rate-limit.js'
import type { SignInBinding } from '../../auth/sign-in-message.js'
import type { TokenIssuer } from '../../auth/token-issuer.js'
import type { Db } from '../../db/knex.js'
import type { ApiRoute } from '../route.js'
import { idpWebhookRoute } from './idp-webhook.js'
import { jwksRoute } from './jwks.js'
import { withAuthRateLimit } from './rate-limited.js'
import { logoutRoute, refreshRoute } from './tokens.js'
import { walletSignInRoutes } from './wallet-sign-in.js'

export type AuthProviderMode = 'idp' | 'both' | 'siwe'

export function walletSignInEnabled(mode: AuthProviderMode): boolean {
  return mode === 'both' || mode === 'siwe'
}

export function idpWebhookEnabled(mode: AuthProviderMode): boolean {
  return mode === 'idp' || mode === 'both'
}

export interface AuthServerRoutesOptions {
  db: Db
  mode: AuthProviderMode
  /** Required when the mode enables wallet sign-in. */
  issuer?: TokenIssuer
  limiter: AuthRateLimiter
  refreshTokenTtlMs: number
  /** The decoded webhook signing secret; without it the webhook is not mounted. */
  webhookKey?: Buffer
  bodyLimitBytes: number
  now: () => Date
  /** AUTH_SIWE_*: the domain, URI and chain wallet sign-in messages are bound to. */
  binding?: SignInBinding
}

export function authServerRoutes(options: AuthServerRoutesOptions): ApiRoute[] {
  const { db, now, refreshTokenTtlMs } = options
  const limited = (route: ApiRoute) => withAuthRateLimit(route, options.limiter, options.bodyLimitBytes)
  const routes: ApiRoute[] = []
  if (walletSignInEnabled(options.mode)) {
    const issuer = options.issuer
    if (!issuer) throw new Error(`mode ${options.mode} serves wallet sign-in and needs a token issuer`)
    routes.push(jwksRoute({ issuer }))
    routes.push(...walletSignInRoutes({ db, issuer, refreshTokenTtlMs, now, ...(options.binding ? { binding: options.binding } : {}) }).map(limited))
    routes.push(limited(refreshRoute({ db, issuer, refreshTokenTtlMs, now })))
  }
  routes.push(limited(logoutRoute({ db, now })))
  if (idpWebhookEnabled(options.mode) && options.webhookKey) {
    routes.push(idpWebhookRoute({ db, key: options.webhookKey, bodyLimitBytes: options.bodyLimitBytes, now }))
  }
  return routes
}

export { IDP_WEBHOOK_PATH } from './idp-webhook.js'
