/**
 * Shared pieces of the API server's auth tests: an api-server app wired exactly as the daemon
 * wires it (authenticator, rate limiter, control-plane routes) on a loopback port, with an
 * injected clock and captured logs; users and keys straight in the database; a local JWKS server.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { PaymentClient } from '../../../src/payments/client.js'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { createApiKey } from '../../../src/auth/api-keys.js'
import { authenticatorFromSettings, type AuthProvider } from '../../../src/auth/authenticator.js'
import { createUser, type User } from '../../../src/auth/users.js'
import type { Db } from '../../../src/db/knex.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { createLogger } from '../../../src/log.js'
import { getJson, type Resources, type StartedApi } from '../http/harness.js'

export class TestClock {
  constructor(public ms: number = Date.now()) {}
  readonly now = (): Date => new Date(this.ms)
  advance(ms: number): void {
    this.ms += ms
  }
}

export interface AuthApiOptions {
  provider?: AuthProvider
  idpJwksUrl?: string
  idpIssuer?: string
  authorizedParties?: string[]
  legacyJwksUrl?: string
  perMinute?: number
  clockSkewMs?: number
  clock?: TestClock
  /** The payment service client for the payment routes (they answer 503 without one). */
  payments?: PaymentClient
  /** AUTH_FAILURE_LIMIT_PER_MINUTE (default 30). */
  failureLimitPerMinute?: number
  /** HTTP_TRUST_PROXY with one proxy hop: tests name the client address in X-Forwarded-For. */
  trustProxy?: boolean
}

export interface AuthApi extends StartedApi {
  clock: TestClock
  /** `fetch` against the API, parsed as JSON. */
  call(method: string, path: string, init?: { bearer?: string; apiKey?: string; body?: unknown; headers?: Record<string, string> }): Promise<{ status: number; headers: Headers; body: unknown }>
}

export async function startAuthApi(resources: Resources, db: Db, options: AuthApiOptions = {}): Promise<AuthApi> {
  const clock = options.clock ?? new TestClock()
  const { authenticate } = authenticatorFromSettings(
    {
      AUTH_PROVIDER: options.provider ?? 'idp',
      AUTH_IDP_JWKS_URL: options.idpJwksUrl,
      AUTH_IDP_ISSUER: options.idpIssuer,
      AUTH_IDP_AUTHORIZED_PARTY: options.authorizedParties ?? [],
      AUTH_CLOCK_SKEW: options.clockSkewMs ?? 30_000,
      // Nothing listens there unless a test says so: legacy tokens then fail as 503.
      AUTH_LEGACY_JWKS_URL: options.legacyJwksUrl ?? 'http://127.0.0.1:9/.well-known/jwks.json',
      ...(options.failureLimitPerMinute !== undefined ? { AUTH_FAILURE_LIMIT_PER_MINUTE: options.failureLimitPerMinute } : {}),
    },
    { db, now: clock.now, keySet: { cooldownMs: 0 }, logger: createLogger({ level: 'silent' }) },
  )
  const limiter = createApiRateLimiter({ perMinute: options.perMinute ?? 600, now: () => clock.ms })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, ...(options.trustProxy ? { trustProxy: true, maxIpsCount: 1 } : {}), routes: controlPlaneRoutes({ db, now: clock.now, ...(options.payments ? { payments: options.payments } : {}) }) })
  const call: AuthApi['call'] = (method, path, init = {}) => {
    const headers: Record<string, string> = { ...(init.headers ?? {}) }
    if (init.bearer !== undefined) headers.authorization = `Bearer ${init.bearer}`
    if (init.apiKey !== undefined) headers['x-api-key'] = init.apiKey
    if (init.body !== undefined) headers['content-type'] = 'application/json'
    return getJson(`${api.url}${path}`, { method, headers, ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}) })
  }
  return { ...api, clock, call }
}

export async function newUser(db: Db, options: { admin?: boolean; externalAuthId?: string } = {}): Promise<User> {
  return createUser(db, { email: `u-${Math.random().toString(36).slice(2)}@example.test`, is_admin: options.admin ?? false, external_auth_id: options.externalAuthId ?? null })
}

/** A key issued straight in the database (what the operator command does). */
export async function newKey(
  db: Db,
  userId: string,
  options: { scopes?: string[]; now?: Date; expiresAt?: Date | null; admin?: boolean } = {},
): Promise<{ id: string; key: string }> {
  const issued = await db.transaction((trx) =>
    createApiKey(
      trx,
      { userId, name: 'test key', scopes: options.scopes ?? ['*'], expiresAt: options.expiresAt ?? null, allowAdmin: options.admin ?? false },
      options.now ?? new Date(),
    ),
  )
  return { id: issued.apiKey.id, key: issued.key }
}

/** An RS256 signing key and its public JWK (with `kid` and `alg`). */
export interface SigningKey {
  kid: string
  privateKey: CryptoKey
  publicKey: CryptoKey
  jwk: JWK
}

export async function signingKey(kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true })
  const jwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }
  return { kid, privateKey, publicKey, jwk }
}

export async function signToken(key: SigningKey, claims: JWTPayload, header: { alg?: string; kid?: string } = {}): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: header.alg ?? 'RS256', kid: header.kid ?? key.kid }).sign(key.privateKey)
}

/** A JWKS endpoint on loopback whose key list a test changes; counts the fetches. */
export interface JwksServer {
  url: string
  keys: JWK[]
  fetches: number
}

export async function startJwksServer(resources: Resources, keys: JWK[]): Promise<JwksServer> {
  const state: JwksServer = { url: '', keys, fetches: 0 }
  const server = http.createServer((req, res) => {
    state.fetches++
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ keys: state.keys }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  resources.add(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`
  return state
}

/** `{ error, details }` with non-empty strings, as every error answer must be. */
export function isErrorBody(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false
  const { error, details } = body as Record<string, unknown>
  return typeof error === 'string' && error.length > 0 && typeof details === 'string' && details.length > 0
}
