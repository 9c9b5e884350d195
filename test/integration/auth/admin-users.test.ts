/**
 * Operators disable and enable users and revoke other users' keys through the admin API
 * (docs/auth.md, "Disabled users"), on both databases: effective on the next request for API keys
 * and identity-provider tokens alike; refresh tokens revoked on disable; admin scope required;
 * an unknown user or key is 404, and nothing changes on a refused call.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createRefreshToken } from '../../../src/auth/refresh-tokens.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { newKey, newUser, signingKey, signToken, startAuthApi, startJwksServer } from './api-harness.js'

const APP = 'https://app.example.test'

describe.each(DIALECTS)('admin user actions on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function setup() {
    const { db } = await resources.database(dialect)
    const key = await signingKey('k1')
    const jwks = await startJwksServer(resources, [key.jwk])
    const api = await startAuthApi(resources, db, { idpJwksUrl: jwks.url, authorizedParties: [APP] })
    const admin = await newUser(db, { admin: true })
    const adminKey = await newKey(db, admin.id, { admin: true, scopes: ['admin'], now: api.clock.now() })
    const target = await newUser(db, { externalAuthId: 'idp|target' })
    const targetKey = await newKey(db, target.id, { scopes: ['*', 'api-keys:manage'], now: api.clock.now() })
    const sec = Math.floor(api.clock.ms / 1000)
    const targetToken = await signToken(key, { sub: 'idp|target', azp: APP, iat: sec, exp: sec + 600 })
    return { db, api, admin, adminKey, target, targetKey, targetToken }
  }

  it('disables a user: every key and token refused on the next request, refresh tokens revoked; enable restores the keys', async () => {
    const { db, api, adminKey, target, targetKey, targetToken } = await setup()
    await createRefreshToken(db, target.id, 3_600_000, api.clock.now())
    expect((await api.call('GET', '/api/v1/me', { apiKey: targetKey.key })).status).toBe(200)
    expect((await api.call('GET', '/api/v1/me', { bearer: targetToken })).status).toBe(200)

    const disabled = await api.call('POST', `/api/v1/admin/users/${encodeURIComponent(target.email as string)}/disable`, { apiKey: adminKey.key })
    expect(disabled.status).toBe(200)
    expect(disabled.body).toMatchObject({ id: target.id, disabled_at: new Date(api.clock.ms).toISOString(), changed: true, revoked_refresh_tokens: 1 })

    const byKey = await api.call('GET', '/api/v1/me', { apiKey: targetKey.key })
    expect(byKey.status).toBe(401)
    expect(byKey.body).toEqual({ error: 'invalid API key', details: 'the user of this API key is disabled' })
    // The token was verified (and cached) before: the user is still read, and refused.
    const byToken = await api.call('GET', '/api/v1/me', { bearer: targetToken })
    expect(byToken.status).toBe(401)
    expect(byToken.body).toMatchObject({ error: 'user disabled' })
    expect(await db('refresh_tokens').where({ user_id: target.id }).whereNull('revoked_at').count({ n: '*' }).first()).toMatchObject({ n: expect.anything() })
    expect(Number(((await db('refresh_tokens').where({ user_id: target.id }).whereNull('revoked_at').count({ n: '*' }).first()) as { n: number | string }).n)).toBe(0)

    // Again: harmless, nothing changes.
    const again = await api.call('POST', `/api/v1/admin/users/${target.id}/disable`, { apiKey: adminKey.key })
    expect(again.body).toMatchObject({ changed: false, revoked_refresh_tokens: 0, disabled_at: new Date(api.clock.ms).toISOString() })

    const enabled = await api.call('POST', `/api/v1/admin/users/${target.id}/enable`, { apiKey: adminKey.key })
    expect(enabled.status).toBe(200)
    expect(enabled.body).toMatchObject({ id: target.id, disabled_at: null, changed: true })
    expect((await api.call('GET', '/api/v1/me', { apiKey: targetKey.key })).status).toBe(200)
    expect((await api.call('GET', '/api/v1/me', { bearer: targetToken })).status).toBe(200)
  })

  it("revokes another user's key at once; again is harmless", async () => {
    const { db, api, adminKey, target, targetKey } = await setup()
    const other = await newKey(db, target.id, { scopes: ['nodes:read'], now: api.clock.now() })
    const res = await api.call('POST', `/api/v1/admin/api-keys/${targetKey.id}/revoke`, { apiKey: adminKey.key })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ id: targetKey.id, user_id: target.id, revoked_at: new Date(api.clock.ms).toISOString() })
    const dead = await api.call('GET', '/api/v1/me', { apiKey: targetKey.key })
    expect(dead.body).toEqual({ error: 'invalid API key', details: 'the API key has been revoked' })
    // Only that key.
    expect((await api.call('GET', '/api/v1/me', { apiKey: other.key })).status).toBe(200)
    expect((await api.call('POST', `/api/v1/admin/api-keys/${targetKey.id}/revoke`, { apiKey: adminKey.key })).status).toBe(200)
  })

  it('needs the admin scope, answers 404 for unknown users and keys, 400 for a malformed key id, 409 for disabling oneself; nothing changes', async () => {
    const { db, api, admin, adminKey, target, targetKey } = await setup()
    const routes = [`/api/v1/admin/users/${target.id}/disable`, `/api/v1/admin/users/${target.id}/enable`, `/api/v1/admin/api-keys/${targetKey.id}/revoke`]
    for (const path of routes) {
      expect((await api.call('POST', path)).status, path).toBe(401)
      const forbidden = await api.call('POST', path, { apiKey: targetKey.key })
      expect(forbidden.status, path).toBe(403)
      expect((forbidden.body as { details: string }).details).toContain('admin')
    }
    expect((await api.call('POST', '/api/v1/admin/users/nobody@example.test/disable', { apiKey: adminKey.key })).status).toBe(404)
    expect((await api.call('POST', '/api/v1/admin/users/00000000-0000-4000-8000-000000000000/enable', { apiKey: adminKey.key })).status).toBe(404)
    expect((await api.call('POST', '/api/v1/admin/api-keys/00000000-0000-4000-8000-000000000000/revoke', { apiKey: adminKey.key })).status).toBe(404)
    const malformed = await api.call('POST', '/api/v1/admin/api-keys/not-a-key/revoke', { apiKey: adminKey.key })
    expect(malformed.status).toBe(400)
    expect((malformed.body as { details: string }).details).toContain('params.id')
    const self = await api.call('POST', `/api/v1/admin/users/${admin.id}/disable`, { apiKey: adminKey.key })
    expect(self.status).toBe(409)
    expect(self.body).toMatchObject({ error: 'cannot disable yourself' })

    const users = (await db('users').whereNotNull('disabled_at').select('id')) as unknown[]
    expect(users).toEqual([])
    expect((await db('api_keys').where({ id: targetKey.id }).first()).revoked_at).toBeNull()
    expect((await api.call('GET', '/api/v1/me', { apiKey: targetKey.key })).status).toBe(200)
  })
})
