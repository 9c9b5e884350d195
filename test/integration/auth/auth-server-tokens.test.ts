/**
 * Issued tokens: access tokens verifiable with jose against the published JWKS (the contract
 * with the API server), refresh rotation, replay -> chain revoked, logout, expiry, several
 * sessions per user, and no plaintext token in the database or the logs. Both databases.
 */
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose'
import { afterEach, describe, expect, it } from 'vitest'
import { createLegacyTokenVerifier } from '../../../src/auth/legacy-tokens.js'
import { hashRefreshToken } from '../../../src/auth/refresh-tokens.js'
import { findUserByWalletAddress } from '../../../src/auth/users.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { getJson, Resources } from '../http/harness.js'
import { postJson, randomWallet, startTestAuthServer, TestClock } from './auth-server-support.js'

interface Tokens {
  access_token: string
  token_type: string
  expires_in: number
  refresh_token: string
  refresh_expires_at: string
}

describe.each(DIALECTS)('auth server tokens on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function setup() {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const server = await startTestAuthServer(resources, t.db, { clock })
    const wallet = randomWallet()
    const signIn = async (): Promise<Tokens> => {
      const nonce = (await getJson(`${server.url}/auth/nonce?address=${wallet.address}`)).body as { message: string }
      const res = await postJson(`${server.url}/auth/verify`, { address: wallet.address, message: nonce.message, signature: await wallet.signMessage(nonce.message) })
      expect(res.status).toBe(200)
      return res.body as unknown as Tokens
    }
    const refresh = async (token: string) => {
      const res = await postJson(`${server.url}/auth/refresh`, { refresh_token: token })
      // A new pair of plaintext tokens: never cacheable.
      if (res.status === 200) expect(res.headers.get('cache-control')).toBe('no-store')
      return res
    }
    return { db: t.db, clock, url: server.url, logs: server.logs, wallet, signIn, refresh }
  }

  it('publishes the signing key at /.well-known/jwks.json and issues tokens that verify against it (contract with the API server)', async () => {
    const { db, clock, url, wallet, signIn } = await setup()
    const jwksRes = await getJson(`${url}/.well-known/jwks.json`)
    expect(jwksRes.status).toBe(200)
    const jwks = jwksRes.body as JSONWebKeySet
    expect(jwks.keys).toHaveLength(1)
    expect(jwks.keys[0]).toMatchObject({ kty: 'RSA', alg: 'RS256', use: 'sig', kid: expect.any(String) })
    expect(jwks.keys[0]).not.toHaveProperty('d')

    const tokens = await signIn()
    const header = decodeProtectedHeader(tokens.access_token)
    expect(header).toMatchObject({ alg: 'RS256', kid: jwks.keys[0]?.kid })
    const { payload } = await jwtVerify(tokens.access_token, createLocalJWKSet(jwks), {
      algorithms: ['RS256'],
      issuer: 'nodeplane-auth',
      audience: 'nodeplane-api',
      currentDate: clock.now(),
    })
    const user = await findUserByWalletAddress(db, wallet.address)
    expect(payload.sub).toBe(user?.id)
    expect(payload.iat).toBe(clock.seconds)
    expect((payload.exp ?? 0) - (payload.iat ?? 0)).toBe(15 * 60)
    expect(tokens.expires_in).toBe(15 * 60)
    expect(Date.parse(tokens.refresh_expires_at) - clock.now().getTime()).toBe(7 * 24 * 3_600_000)
  })

  it("the API server's legacy-token verifier accepts the issued tokens (fetching this JWKS)", async () => {
    const { db, clock, url, wallet, signIn } = await setup()
    const tokens = await signIn()
    const verifier = createLegacyTokenVerifier({ jwksUrl: `${url}/.well-known/jwks.json`, clockSkewMs: 30_000 })
    const identity = await verifier.verify(tokens.access_token, clock.now())
    expect(identity.userId).toBe((await findUserByWalletAddress(db, wallet.address))?.id)
    clock.advance(15 * 60_000 + 31_000)
    await expect(verifier.verify(tokens.access_token, clock.now())).rejects.toMatchObject({ status: 401 })
  })

  it('rotates a refresh token: the new pair works, the old token is dead', async () => {
    const { clock, url, signIn, refresh } = await setup()
    const first = await signIn()
    clock.advance(60_000)
    const rotated = await refresh(first.refresh_token)
    expect(rotated.status).toBe(200)
    const second = rotated.body as unknown as Tokens
    expect(second.refresh_token).not.toBe(first.refresh_token)
    expect(second.access_token).not.toBe(first.access_token)
    const jwks = (await getJson(`${url}/.well-known/jwks.json`)).body as JSONWebKeySet
    await jwtVerify(second.access_token, createLocalJWKSet(jwks), { issuer: 'nodeplane-auth', audience: 'nodeplane-api', currentDate: clock.now() })

    const third = await refresh(second.refresh_token)
    expect(third.status).toBe(200)
  })

  it('a replayed (already rotated) token is refused and revokes every later token of its sign-in, but not other sign-ins', async () => {
    const { db, signIn, refresh, logs } = await setup()
    const session = await signIn()
    const other = await signIn()
    const second = (await refresh(session.refresh_token)).body as unknown as Tokens
    const third = (await refresh(second.refresh_token)).body as unknown as Tokens

    const replay = await refresh(session.refresh_token)
    expect(replay.status).toBe(401)
    expect(replay.body).toMatchObject({ error: 'invalid refresh token', details: expect.stringContaining('already used') })
    expect(logs.lines.some((l) => l.msg === 'refresh token reused: every later token of its sign-in revoked' && l.revokedTokens === 1)).toBe(true)

    // The thief (or the client) holding the newest token is cut off too.
    expect((await refresh(third.refresh_token)).status).toBe(401)
    const rows = await activeTokens(db)
    expect(rows).toEqual([hashRefreshToken(other.refresh_token)])
    // The other sign-in of the same user is untouched.
    expect((await refresh(other.refresh_token)).status).toBe(200)
  })

  it('refuses an expired refresh token', async () => {
    const { clock, signIn, refresh } = await setup()
    const tokens = await signIn()
    clock.advance(7 * 24 * 3_600_000)
    const res = await refresh(tokens.refresh_token)
    expect(res.status).toBe(401)
    expect(res.body).toMatchObject({ details: expect.stringContaining('expired') })
  })

  it('refuses unknown and malformed refresh tokens (401 / 400)', async () => {
    const { refresh, url } = await setup()
    expect((await refresh(`npr_${'A'.repeat(43)}`)).status).toBe(401)
    expect((await refresh('garbage')).status).toBe(401)
    expect((await postJson(`${url}/auth/refresh`, {})).status).toBe(400)
  })

  it('logout revokes the token (204); unknown or repeated logouts are 204 too', async () => {
    const { db, url, signIn, refresh } = await setup()
    const a = await signIn()
    const b = await signIn()
    const logout = (token: string) => postJson(`${url}/auth/logout`, { refresh_token: token })
    expect((await logout(a.refresh_token)).status).toBe(204)
    expect((await refresh(a.refresh_token)).status).toBe(401)
    expect((await logout(a.refresh_token)).status).toBe(204)
    expect((await logout(`npr_${'B'.repeat(43)}`)).status).toBe(204)
    expect((await postJson(`${url}/auth/logout`, {})).status).toBe(400)
    expect(await activeTokens(db)).toEqual([hashRefreshToken(b.refresh_token)])
  })

  it('logout with an already rotated token ends the whole sign-in', async () => {
    const { url, signIn, refresh } = await setup()
    const first = await signIn()
    const second = (await refresh(first.refresh_token)).body as unknown as Tokens
    expect((await postJson(`${url}/auth/logout`, { refresh_token: first.refresh_token })).status).toBe(204)
    expect((await refresh(second.refresh_token)).status).toBe(401)
  })

  it('two concurrent refreshes of one token: one succeeds, and the reuse revokes what it issued', async () => {
    const { signIn, refresh } = await setup()
    const tokens = await signIn()
    const results = await Promise.all([refresh(tokens.refresh_token), refresh(tokens.refresh_token)])
    expect(results.map((r) => r.status).sort()).toEqual([200, 401])
    const winner = results.find((r) => r.status === 200)?.body as unknown as Tokens
    expect((await refresh(winner.refresh_token)).status).toBe(401)
  })

  it('never stores or logs a plaintext token', async () => {
    const { db, signIn, refresh, url, logs } = await setup()
    const first = await signIn()
    const second = (await refresh(first.refresh_token)).body as unknown as Tokens
    await postJson(`${url}/auth/logout`, { refresh_token: second.refresh_token })
    const secrets = [first.refresh_token, second.refresh_token, first.access_token, second.access_token]
    const dump = JSON.stringify(await Promise.all(['refresh_tokens', 'users', 'auth_nonces', 'auth_rate_buckets', 'idempotency_keys'].map((t) => db(t).select())))
    const text = logs.text()
    expect(text.length).toBeGreaterThan(0)
    for (const secret of secrets) {
      expect(dump).not.toContain(secret)
      expect(dump).not.toContain(secret.slice(4, 24))
      expect(text).not.toContain(secret)
    }
    expect(dump).toContain(hashRefreshToken(first.refresh_token))
  })
})

async function activeTokens(db: Db): Promise<string[]> {
  const rows = (await db('refresh_tokens').whereNull('revoked_at').select('token_hash')) as Array<{ token_hash: string }>
  return rows.map((r) => r.token_hash).sort()
}
