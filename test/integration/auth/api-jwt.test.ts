import { setAdmin } from '../../../src/auth/users.js'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { exportSPKI, generateKeyPair, SignJWT, UnsecuredJWT, type CryptoKey, type JWTPayload } from 'jose'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ADMIN_SCOPE, USER_SCOPES } from '../../../src/auth/scopes.js'
import { loadOrCreateSigningKey } from '../../../src/auth/signing-key.js'
import { createTokenIssuer } from '../../../src/auth/token-issuer.js'
import { LEGACY_TOKEN_AUDIENCE, LEGACY_TOKEN_ISSUER } from '../../../src/auth/legacy-tokens.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, signingKey, signToken, startAuthApi, startJwksServer, type AuthApi, type AuthApiOptions, type SigningKey } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

// RSA key generation is the slow part of this file: every key is made once, up front.
const keys = {} as Record<'k1' | 'k2' | 'rogue' | 'legacy', SigningKey> & { other: Record<string, CryptoKey> }
beforeAll(async () => {
  ;[keys.k1, keys.k2, keys.rogue, keys.legacy] = await Promise.all([signingKey('idp-1'), signingKey('idp-2'), signingKey('idp-1'), signingKey('auth-server-1')])
  keys.other = {}
  for (const alg of ['RS512', 'PS256', 'ES256']) keys.other[alg] = (await generateKeyPair(alg)).privateKey
})

const APP = 'https://app.example.test'
const ISSUER = 'https://idp.example.test'
const SKEW_S = 30

async function idpSetup(db: Db, options: AuthApiOptions = {}) {
  const k1 = keys.k1
  const jwks = await startJwksServer(resources, [k1.jwk])
  const api = await startAuthApi(resources, db, { idpJwksUrl: jwks.url, authorizedParties: [APP, 'https://other.example.test'], clockSkewMs: SKEW_S * 1000, ...options })
  const sec = Math.floor(api.clock.ms / 1000)
  const claims = (sub: string, extra: JWTPayload = {}): JWTPayload => ({ sub, azp: APP, iss: ISSUER, iat: sec, exp: sec + 300, ...extra })
  return { k1, jwks, api, sec, claims }
}

async function expect401(api: AuthApi, token: string, details: RegExp): Promise<void> {
  const res = await api.call('GET', '/api/v1/me', { bearer: token })
  expect(res.status, JSON.stringify(res.body)).toBe(401)
  expect(isErrorBody(res.body)).toBe(true)
  expect((res.body as { details: string }).details).toMatch(details)
  expect(res.headers.get('www-authenticate')).toBe('Bearer realm="nodeplane", error="invalid_token"')
}

async function expectUser(api: AuthApi, token: string, userId: string): Promise<{ scopes: string[]; auth_method: string }> {
  const res = await api.call('GET', '/api/v1/me', { bearer: token })
  expect(res.status, JSON.stringify(res.body)).toBe(200)
  expect(res.body).toMatchObject({ user_id: userId, auth_method: 'jwt' })
  expect(res.body).not.toHaveProperty('api_key_id')
  return res.body as { scopes: string[]; auth_method: string }
}

describe.each(DIALECTS)('identity-provider JWTs on %s', (dialect) => {
  it('accepts a valid RS256 token and refuses every broken variant', async () => {
    const { db } = await resources.database(dialect)
    const { k1, api, sec, claims } = await idpSetup(db)
    const user = await newUser(db, { externalAuthId: 'idp|alice' })
    const admin = await newUser(db, { externalAuthId: 'idp|root', admin: true })

    const me = await expectUser(api, await signToken(k1, claims('idp|alice')), user.id)
    expect(me.scopes).toEqual([...USER_SCOPES])
    expect((await expectUser(api, await signToken(k1, claims('idp|root')), admin.id)).scopes).toEqual([...USER_SCOPES, ADMIN_SCOPE])
    // A JWT caller manages its keys with every scope but admin.
    const aliceToken = await signToken(k1, claims('idp|alice'))
    const created = await api.call('POST', '/api/v1/api-keys', { bearer: aliceToken, body: { name: 'from jwt', scopes: ['*'] } })
    expect(created.status).toBe(201)
    expect((await api.call('GET', '/api/v1/me', { bearer: (created.body as { key: string }).key })).body).toMatchObject({ user_id: user.id, scopes: ['*'] })
    const rootToken = await signToken(k1, claims('idp|root'))
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: rootToken, body: { name: 'x', scopes: ['admin'] } })).status).toBe(400)
    expect(api.logs.text()).not.toContain((created.body as { key: string }).key)
    // A trailing slash names the same origin.
    await expectUser(api, await signToken(k1, claims('idp|alice', { azp: `${APP}/` })), user.id)

    await expect401(api, await signToken(k1, claims('idp|alice', { azp: 'https://evil.example.test' })), /azp "https:\/\/evil.example.test" is not one of AUTH_IDP_AUTHORIZED_PARTY/)
    await expect401(api, await signToken(k1, claims('idp|alice', { azp: undefined })), /azp missing/)
    await expect401(api, await signToken(k1, claims('idp|nobody')), /no local user/)
    await expect401(api, await signToken(k1, claims('idp|alice', { sub: undefined })), /claim "sub" is missing/)
    await expect401(api, await signToken(k1, claims('idp|alice', { exp: undefined })), /claim "exp" is missing/)

    // The HS/RS confusion attack: HS256 keyed with the public key's bytes.
    const publicPem = await exportSPKI(k1.publicKey)
    const confused = await new SignJWT(claims('idp|alice')).setProtectedHeader({ alg: 'HS256', kid: k1.kid }).sign(new TextEncoder().encode(publicPem))
    await expect401(api, confused, /only RS256 is accepted/)
    await expect401(api, new UnsecuredJWT(claims('idp|alice')).encode(), /only RS256 is accepted/)
    for (const [alg, privateKey] of Object.entries(keys.other)) {
      await expect401(api, await new SignJWT(claims('idp|alice')).setProtectedHeader({ alg, kid: k1.kid }).sign(privateKey), /only RS256 is accepted/)
    }

    // Tampered payload, original signature.
    const [h, , sig] = (await signToken(k1, claims('idp|alice'))).split('.')
    const forged = Buffer.from(JSON.stringify(claims('idp|root'))).toString('base64url')
    await expect401(api, `${h}.${forged}.${sig}`, /bad signature/)
    // Signed by a key the provider never published, under the provider's kid.
    await expect401(api, await signToken(keys.rogue, claims('idp|root')), /bad signature/)

    // Time: expired and not-yet-valid, with AUTH_CLOCK_SKEW of tolerance.
    await expectUser(api, await signToken(k1, claims('idp|alice', { exp: sec - SKEW_S + 5 })), user.id)
    await expect401(api, await signToken(k1, claims('idp|alice', { exp: sec - SKEW_S - 5 })), /expired/)
    await expectUser(api, await signToken(k1, claims('idp|alice', { nbf: sec + SKEW_S - 5 })), user.id)
    await expect401(api, await signToken(k1, claims('idp|alice', { nbf: sec + SKEW_S + 5 })), /not yet valid/)
    const shortLived = await signToken(k1, claims('idp|alice', { exp: sec + 60 }))
    await expectUser(api, shortLived, user.id)
    api.clock.advance((60 + SKEW_S + 1) * 1000)
    await expect401(api, shortLived, /expired/)

    // No token or its parts in the logs.
    const logs = api.logs.text()
    expect(logs).not.toContain(sig)
    expect(logs).not.toContain(forged)
  })

  it('refetches the key set when a token names an unknown kid', async () => {
    const { db } = await resources.database(dialect)
    const { k1, jwks, api, claims } = await idpSetup(db)
    const user = await newUser(db, { externalAuthId: 'idp|alice' })
    await expectUser(api, await signToken(k1, claims('idp|alice')), user.id)
    await expectUser(api, await signToken(k1, claims('idp|alice')), user.id)
    expect(jwks.fetches).toBe(1)

    const k2 = keys.k2
    const rotatedToken = await signToken(k2, claims('idp|alice'))
    await expect401(api, rotatedToken, /no key in the key set matches/)
    expect(jwks.fetches).toBe(2)
    // The provider publishes its new key: the next token with that kid triggers a refetch.
    jwks.keys.push(k2.jwk)
    await expectUser(api, rotatedToken, user.id)
    expect(jwks.fetches).toBe(3)
    await expectUser(api, await signToken(k1, claims('idp|alice')), user.id)
    expect(jwks.fetches).toBe(3)
  })

  it('checks iss when AUTH_IDP_ISSUER is set, refuses tokens without a key set, 503 when the key set is down', async () => {
    const { db } = await resources.database(dialect)
    const { k1, api, claims } = await idpSetup(db, { idpIssuer: ISSUER })
    const user = await newUser(db, { externalAuthId: 'idp|alice' })
    await expectUser(api, await signToken(k1, claims('idp|alice')), user.id)
    await expect401(api, await signToken(k1, claims('idp|alice', { iss: 'https://elsewhere.test' })), /claim "iss" is not accepted/)

    const noJwks = await startAuthApi(resources, db, { authorizedParties: [APP] })
    await expect401(noJwks, await signToken(k1, claims('idp|alice')), /AUTH_IDP_JWKS_URL is not set/)
    const key = await newKey(db, user.id)
    expect((await noJwks.call('GET', '/api/v1/me', { bearer: key.key })).status).toBe(200)

    const down = await startAuthApi(resources, db, { idpJwksUrl: 'http://127.0.0.1:9/jwks.json', authorizedParties: [APP] })
    const res = await down.call('GET', '/api/v1/me', { bearer: await signToken(k1, claims('idp|alice')) })
    expect(res.status).toBe(503)
    expect(res.body).toMatchObject({ error: 'token keys unavailable' })
  })

  it('AUTH_PROVIDER decides which issuers count; API keys work in every mode', async () => {
    const { db } = await resources.database(dialect)
    const { k1, legacy: legacyKey } = keys
    const idpJwks = await startJwksServer(resources, [k1.jwk])
    const legacyJwks = await startJwksServer(resources, [legacyKey.jwk])
    const user = await newUser(db, { externalAuthId: 'idp|alice' })
    const apiKey = await newKey(db, user.id)

    const sec = Math.floor(Date.now() / 1000)
    const idpToken = await signToken(k1, { sub: 'idp|alice', azp: APP, iat: sec, exp: sec + 300 })
    const legacyClaims = { iss: LEGACY_TOKEN_ISSUER, aud: LEGACY_TOKEN_AUDIENCE, sub: user.id, iat: sec, exp: sec + 300 }
    const legacyToken = await signToken(legacyKey, legacyClaims)
    const start = (provider: 'idp' | 'both' | 'siwe') =>
      startAuthApi(resources, db, { provider, idpJwksUrl: idpJwks.url, legacyJwksUrl: legacyJwks.url, authorizedParties: [APP] })

    const idp = await start('idp')
    await expectUser(idp, idpToken, user.id)
    await expect401(idp, legacyToken, /wallet path is disabled \(AUTH_PROVIDER=idp\)/)
    expect(legacyJwks.fetches).toBe(0)

    const both = await start('both')
    await expectUser(both, idpToken, user.id)
    await expectUser(both, legacyToken, user.id)

    const siwe = await start('siwe')
    await expect401(siwe, idpToken, /identity-provider tokens are not accepted \(AUTH_PROVIDER=siwe\)/)
    await expectUser(siwe, legacyToken, user.id)
    // Legacy tokens are held to their own contract.
    await expect401(siwe, await signToken(legacyKey, { ...legacyClaims, aud: 'someone-else' }), /claim "aud"/)
    await expect401(siwe, await signToken(legacyKey, { ...legacyClaims, iat: undefined }), /claim "iat" is missing/)
    await expect401(siwe, await signToken(legacyKey, { ...legacyClaims, sub: 'idp|alice' }), /sub is not a user id/)
    await expect401(siwe, await signToken(legacyKey, { ...legacyClaims, sub: '00000000-0000-4000-8000-000000000000' }), /no existing user/)
    // An identity-provider key cannot mint wallet-path tokens.
    await expect401(siwe, await signToken(k1, legacyClaims), /no key in the key set matches/)
    const confused = await new SignJWT(legacyClaims)
      .setProtectedHeader({ alg: 'HS256', kid: legacyKey.kid })
      .sign(new TextEncoder().encode(await exportSPKI(legacyKey.publicKey)))
    await expect401(siwe, confused, /only RS256 is accepted/)

    for (const api of [idp, both, siwe]) {
      const res = await api.call('GET', '/api/v1/me', { apiKey: apiKey.key })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ auth_method: 'api_key', api_key_id: apiKey.id })
      for (const token of [idpToken, legacyToken]) expect(api.logs.text()).not.toContain(token.split('.')[2])
    }
    // Nothing of a token is written anywhere (the API server stores no session).
    const stored = [...(await db('api_keys').select('*')), ...(await db('users').select('*'))]
      .flatMap((r: Record<string, unknown>) => Object.values(r).filter((v): v is string => typeof v === 'string'))
      .join('\n')
    for (const token of [idpToken, legacyToken]) expect(stored).not.toContain(token.split('.')[2])
  })

  it('accepts access tokens exactly as the auth-server issues them (the legacy contract)', async () => {
    const { db } = await resources.database(dialect)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-auth-key-'))
    resources.add(async () => fs.rmSync(dir, { recursive: true, force: true }))
    const issuer = createTokenIssuer({ key: await loadOrCreateSigningKey(path.join(dir, 'key.pem')), accessTokenTtlMs: 15 * 60_000 })
    const jwks = await startJwksServer(resources, issuer.jwks().keys)
    const api = await startAuthApi(resources, db, { provider: 'both', legacyJwksUrl: jwks.url })
    const user = await newUser(db)
    const { token } = await issuer.issueAccessToken(user.id, api.clock.now())
    await expectUser(api, token, user.id)
    // A verified token is remembered, but its user is read on every request: a change to the
    // user applies to the very next request with the same token.
    await setAdmin(db, user.id, true)
    const promoted = await api.call('GET', '/api/v1/me', { bearer: token })
    expect(promoted.body).toMatchObject({ is_admin: true, scopes: expect.arrayContaining(['admin']) })
    await db('users').where({ id: user.id }).update({ email: null })
    await db('api_keys').where({ user_id: user.id }).del()
    await db('users').where({ id: user.id }).del()
    await expect401(api, token, /no existing user/)
    api.clock.advance(15 * 60_000 + SKEW_S * 1000 + 1000)
    await expect401(api, token, /expired/)
  })
})
