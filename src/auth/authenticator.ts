/**
 * The API server's authenticator: the "authentication" step of the chain (spec, Authentication:
 * "correlation id, tracing, metrics, logging, authentication, rate limiting, scope check,
 * handler"). It turns the request's credential into a Principal or answers 401.
 *
 * Credentials: `Authorization: Bearer <token>` or `X-API-Key: <key>`. A token starting with
 * `np_` is an API key, anything else a JWT, told apart by its unverified `iss`: the wallet
 * sign-in issuer (`nodeplane-auth`) or else the identity provider. AUTH_PROVIDER decides which
 * JWTs count: `idp` identity-provider ones only, `siwe` wallet sign-in ones only, `both` either.
 * API keys work in every mode.
 *
 * Scopes: an API key carries its own, but `admin` only while its owner is still an admin; a JWT
 * caller gets every scope of a normal user plus `admin` when the user is an admin.
 *
 * The credential itself is never logged nor quoted in an answer.
 */
import { decodeJwt } from 'jose'
import type { Queryable } from '../db/knex.js'
import { UnauthorizedError } from '../errors.js'
import type { Logger } from '../log.js'
import type { Authenticator } from '../http/auth.js'
import type { ApiContext, Principal } from '../http/context.js'
import { HttpError } from '../http/http-errors.js'
import { checkApiKey, looksLikeApiKey, type ApiKeyRejection } from './api-keys.js'
import { createAuthRateLimiter } from './auth-rate-limit.js'
import { createFailedAuthThrottle, DEFAULT_AUTH_FAILURE_LIMIT_PER_MINUTE, type FailedAuthThrottle } from './failed-auth-throttle.js'
import { createIdpTokenVerifier, type IdpTokenVerifier, type KeySetOptions } from './idp-tokens.js'
import { createLegacyTokenVerifier, defaultLegacyJwksUrl, LEGACY_TOKEN_ISSUER, type LegacyTokenVerifier } from './legacy-tokens.js'
import { ADMIN_SCOPE, USER_SCOPES } from './scopes.js'
import { lookUpUserByExternalAuthId, lookUpUserById } from './user-lookups.js'
import type { User } from './users.js'

export type AuthProvider = 'idp' | 'both' | 'siwe'

export const API_KEY_HEADER = 'x-api-key'
/** A credential longer than this is not one we issued (JWTs from common providers are ~1-2 KiB). */
export const MAX_CREDENTIAL_LENGTH = 8192

/**
 * 401 with the challenge RFC 6750 asks for. The error mapping keeps only the headers an
 * HttpError declares, so the challenge travels on the error itself.
 */
export class AuthenticationError extends HttpError {
  readonly status = 401
  readonly code = 'unauthorized'
  override readonly headers: Readonly<Record<string, string>>
  constructor(message: string, details: string, invalidToken: boolean) {
    super(message, details)
    this.headers = { 'WWW-Authenticate': invalidToken ? 'Bearer realm="nodeplane", error="invalid_token"' : 'Bearer realm="nodeplane"' }
  }
}

export interface AuthenticatorDeps {
  db: Queryable
  provider: AuthProvider
  idp: IdpTokenVerifier
  legacy: LegacyTokenVerifier
  now?: () => Date
  verifiedTokens?: VerifiedTokens
}

export type Credential = { kind: 'api_key'; value: string } | { kind: 'jwt'; value: string }

/** Reads the one credential of a request; throws AuthenticationError when absent or garbled. */
export function credentialOf(headers: Record<string, string | string[] | undefined>): Credential {
  const authorization = single(headers.authorization, 'Authorization')
  const apiKeyHeader = single(headers[API_KEY_HEADER], 'X-API-Key')
  let token: string | undefined
  if (authorization !== undefined) {
    const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization)
    if (!match) throw new AuthenticationError('invalid credentials', 'the Authorization header must be "Bearer <token or API key>"', true)
    token = match[1] as string
  }
  if (apiKeyHeader !== undefined) {
    const key = apiKeyHeader.trim()
    if (!looksLikeApiKey(key)) throw new AuthenticationError('invalid credentials', 'X-API-Key must carry an API key (np_...)', true)
    if (token !== undefined && token !== key) {
      throw new AuthenticationError('invalid credentials', 'send one credential: Authorization and X-API-Key disagree', true)
    }
    token = key
  }
  if (token === undefined) {
    throw new AuthenticationError('unauthorized', 'no credentials: send "Authorization: Bearer <token>" or "X-API-Key: <key>"', false)
  }
  if (token.length > MAX_CREDENTIAL_LENGTH) throw new AuthenticationError('invalid credentials', 'the credential is too long to be valid', true)
  return looksLikeApiKey(token) ? { kind: 'api_key', value: token } : { kind: 'jwt', value: token }
}

function single(value: string | string[] | undefined, name: string): string | undefined {
  if (Array.isArray(value)) {
    if (value.length > 1) throw new AuthenticationError('invalid credentials', `send ${name} once`, true)
    return value[0]
  }
  return value
}

const API_KEY_REFUSED: Record<ApiKeyRejection, string> = {
  malformed: 'the API key is malformed',
  unknown: 'the API key is not known',
  revoked: 'the API key has been revoked',
  expired: 'the API key has expired',
  deleted: 'the API key has been deleted',
  user_disabled: 'the user of this API key is disabled',
}

/** Establishes the caller from a credential; throws UnauthorizedError (401) when it does not hold. */
export async function principalFor(deps: AuthenticatorDeps, credential: Credential, now: Date): Promise<Principal> {
  if (credential.kind === 'api_key') {
    const result = await checkApiKey(deps.db, credential.value, now)
    if (!result.ok) throw new UnauthorizedError('invalid API key', API_KEY_REFUSED[result.reason])
    const { apiKey, owner } = result
    // `admin` on a key lasts only as long as its owner is an admin (an operator revoking the
    // flag must not leave admin keys working).
    const scopes = owner.is_admin ? apiKey.scopes : apiKey.scopes.filter((s) => s !== ADMIN_SCOPE)
    return { userId: owner.id, method: 'api_key', scopes, apiKeyId: apiKey.id, user: owner }
  }
  const user = await userForJwt(deps, credential.value, now)
  return { userId: user.id, method: 'jwt', scopes: user.is_admin ? [...USER_SCOPES, ADMIN_SCOPE] : [...USER_SCOPES], user }
}

/**
 * Tokens whose signature and claims were verified recently, so a client reusing its token does
 * not pay the RSA verification on every request. An entry lives until the token's `exp` and
 * at most VERIFIED_TOKEN_TTL_MS, which bounds how long a key removed from a key set keeps
 * working. The user is still read on every request (deleted users, admin changes).
 */
const VERIFIED_TOKEN_TTL_MS = 60_000
const VERIFIED_TOKEN_CACHE_SIZE = 10_000

type VerifiedClaims = { issuer: 'legacy'; userId: string } | { issuer: 'idp'; subject: string }
type VerifiedToken = VerifiedClaims & { until: number }

class VerifiedTokens {
  private readonly entries = new Map<string, VerifiedToken>()

  get(token: string, now: Date): VerifiedToken | undefined {
    const entry = this.entries.get(token)
    if (entry && entry.until > now.getTime()) return entry
    if (entry) this.entries.delete(token)
    return undefined
  }

  set(token: string, claims: VerifiedClaims, now: Date): void {
    const exp = decodeJwt(token).exp
    const until = Math.min(typeof exp === 'number' ? exp * 1000 : now.getTime(), now.getTime() + VERIFIED_TOKEN_TTL_MS)
    if (until <= now.getTime()) return
    if (this.entries.size >= VERIFIED_TOKEN_CACHE_SIZE) this.entries.delete(this.entries.keys().next().value as string)
    this.entries.set(token, { ...claims, until })
  }
}

async function userForJwt(deps: AuthenticatorDeps, token: string, now: Date): Promise<User> {
  const verified = deps.verifiedTokens?.get(token, now)
  if (verified) {
    // The mode may have changed since; the checks below that do not need the signature run again.
    if (verified.issuer === 'legacy' && deps.provider !== 'idp') return existingUser(await lookUpUserById(deps.db, verified.userId))
    if (verified.issuer === 'idp' && deps.provider !== 'siwe') return knownIdpUser(await lookUpUserByExternalAuthId(deps.db, verified.subject))
  }
  let issuer: unknown
  try {
    issuer = decodeJwt(token).iss
  } catch {
    throw new UnauthorizedError('invalid token', 'the bearer token is neither an API key (np_...) nor a well-formed JWT')
  }
  if (issuer === LEGACY_TOKEN_ISSUER) {
    if (deps.provider === 'idp') {
      throw new UnauthorizedError('invalid token', 'wallet sign-in tokens are not accepted: the wallet path is disabled (AUTH_PROVIDER=idp); sign in with the identity provider or use an API key')
    }
    const { userId } = await deps.legacy.verify(token, now)
    deps.verifiedTokens?.set(token, { issuer: 'legacy', userId }, now)
    return existingUser(await lookUpUserById(deps.db, userId))
  }
  if (deps.provider === 'siwe') {
    throw new UnauthorizedError('invalid token', 'identity-provider tokens are not accepted (AUTH_PROVIDER=siwe); use wallet sign-in or an API key')
  }
  const { subject } = await deps.idp.verify(token, now)
  deps.verifiedTokens?.set(token, { issuer: 'idp', subject }, now)
  return knownIdpUser(await lookUpUserByExternalAuthId(deps.db, subject))
}

function existingUser(user: User | undefined): User {
  if (!user) throw new UnauthorizedError('invalid token', 'the token names no existing user')
  return enabled(user)
}

function knownIdpUser(user: User | undefined): User {
  if (!user) throw new UnauthorizedError('unknown user', 'no local user for this identity-provider account; it is created when the provider reports the sign-up')
  return enabled(user)
}

/** A disabled user's tokens are refused on the next request, whoever issued them. */
function enabled(user: User): User {
  if (user.disabled_at) throw new UnauthorizedError('user disabled', 'this user has been disabled by an operator')
  return user
}

/** Whether the request carries a credential at all (an anonymous call is not a failed attempt). */
function sendsCredential(ctx: ApiContext): boolean {
  return ctx.headers.authorization !== undefined || ctx.headers[API_KEY_HEADER] !== undefined
}

/**
 * The Authenticator for createApiApp. With a `throttle`, an address that has used up its failed
 * authentications is answered 429 before its credential is looked at (no database read), and
 * every refused credential counts against its address (the client address, ctx.ip: the TCP
 * peer, or behind HTTP_TRUST_PROXY the client HTTP_MAX_IPS_COUNT hops from the right).
 */
export function createAuthenticator(options: AuthenticatorDeps & { throttle?: FailedAuthThrottle }): Authenticator {
  const deps: AuthenticatorDeps = { ...options, verifiedTokens: options.verifiedTokens ?? new VerifiedTokens() }
  const now = deps.now ?? (() => new Date())
  const throttle = options.throttle
  return async (ctx: ApiContext) => {
    const counted = throttle !== undefined && sendsCredential(ctx)
    if (counted) throttle.check(ctx.ip)
    try {
      return await principalFor(deps, credentialOf(ctx.headers), now())
    } catch (err) {
      const refused = err instanceof UnauthorizedError || err instanceof AuthenticationError
      if (refused && counted) await throttle.failed(ctx.ip)
      if (err instanceof UnauthorizedError) {
        ctx.state.log.debug({ reason: err.details }, 'authentication refused')
        throw new AuthenticationError(err.message, err.details, true)
      }
      throw err
    }
  }
}

/** The environment the API server's authentication reads (apiServerEnv / upEnv). */
export interface AuthenticationSettings {
  AUTH_PROVIDER?: AuthProvider
  AUTH_IDP_JWKS_URL?: string | undefined
  AUTH_IDP_ISSUER?: string | undefined
  AUTH_IDP_AUTHORIZED_PARTY?: readonly string[]
  /** ms */
  AUTH_CLOCK_SKEW?: number
  AUTH_LEGACY_JWKS_URL?: string | undefined
  AUTH_SERVER_PORT?: number
  /** Failed authentications per client address and minute before 429 (docs/auth.md). */
  AUTH_FAILURE_LIMIT_PER_MINUTE?: number
  /** What wallet registration messages are bound to (sign-in-message.ts); defaults there. */
  AUTH_SIWE_DOMAIN?: string
  AUTH_SIWE_URI?: string
  AUTH_SIWE_CHAIN_ID?: number
  AUTH_SIWE_SOLANA_CHAIN?: string
}

export const DEFAULT_CLOCK_SKEW_MS = 30_000

/** Builds the authenticator from configuration (defaults as in src/config/env.ts). */
export function authenticatorFromSettings(
  settings: AuthenticationSettings,
  deps: { db: Queryable; now?: () => Date; keySet?: KeySetOptions; logger?: Logger },
): { authenticate: Authenticator; provider: AuthProvider; idp: IdpTokenVerifier } {
  const clockSkewMs = settings.AUTH_CLOCK_SKEW ?? DEFAULT_CLOCK_SKEW_MS
  const provider = settings.AUTH_PROVIDER ?? 'idp'
  const idp = createIdpTokenVerifier({
    jwksUrl: settings.AUTH_IDP_JWKS_URL,
    issuer: settings.AUTH_IDP_ISSUER,
    authorizedParties: settings.AUTH_IDP_AUTHORIZED_PARTY ?? [],
    clockSkewMs,
    ...(deps.keySet ? { keySet: deps.keySet } : {}),
  })
  const legacy = createLegacyTokenVerifier({
    jwksUrl: settings.AUTH_LEGACY_JWKS_URL ?? defaultLegacyJwksUrl(settings.AUTH_SERVER_PORT ?? 8081),
    clockSkewMs,
    ...(deps.keySet ? { keySet: deps.keySet } : {}),
  })
  const now = deps.now ?? (() => new Date())
  const failureLimit = settings.AUTH_FAILURE_LIMIT_PER_MINUTE ?? DEFAULT_AUTH_FAILURE_LIMIT_PER_MINUTE
  const throttle = createFailedAuthThrottle({
    limitPerMinute: failureLimit,
    now,
    ...(deps.logger
      ? { shared: createAuthRateLimiter({ db: deps.db, limitPerMinute: failureLimit, logger: deps.logger, now, describe: 'failed authentications per minute' }) }
      : {}),
  })
  const authenticate = createAuthenticator({ db: deps.db, provider, idp, legacy, now, throttle })
  return { authenticate, provider, idp }
}
