import { afterEach, describe, expect, it } from 'vitest'
import { startApiServer } from '../../../daemons/api-server.js'
import { apiServerEnv, loadConfig } from '../../../src/config/env.js'
import { createLogger } from '../../../src/log.js'
import { DIALECTS } from '../../helpers/db.js'
import { getJson, LogCapture, Resources } from '../http/harness.js'
import { newKey, newUser } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

describe.each(DIALECTS)('api-server daemon wiring on %s', (dialect) => {
  it('serves the control-plane routes behind the authenticator and the rate limit from its config', async () => {
    const { db } = await resources.database(dialect)
    const config = loadConfig(apiServerEnv, { API_RATE_LIMIT_PER_MINUTE: '2', AUTH_IDP_AUTHORIZED_PARTY: 'https://app.example.test' })
    const logs = new LogCapture()
    const server = await startApiServer({ ...config, API_SERVER_PORT: 0 }, { db, bus: resources.localBus(), logger: createLogger({ destination: logs, level: 'debug' }) })
    resources.add(() => server.stop())
    const user = await newUser(db)
    const { key, id } = await newKey(db, user.id)

    expect((await getJson(`${server.url}/health`)).status).toBe(200)
    const none = await getJson(`${server.url}/api/v1/me`)
    expect(none.status).toBe(401)
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="nodeplane"')

    const me = await getJson(`${server.url}/api/v1/me`, { headers: { 'x-api-key': key } })
    expect(me.status).toBe(200)
    expect(me.body).toMatchObject({ user_id: user.id, auth_method: 'api_key', api_key_id: id })
    expect((await getJson(`${server.url}/api/v1/api-keys`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200)
    const limited = await getJson(`${server.url}/api/v1/me`, { headers: { 'x-api-key': key } })
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)

    // No identity-provider key set configured: such tokens are refused, and the log says why at start.
    expect(logs.lines.some((l) => l.level === 'warn' && String(l.msg).includes('AUTH_IDP_JWKS_URL is not set'))).toBe(true)

    const doc = (await getJson(`${server.url}/api/v1/openapi.json`)).body as { paths: Record<string, Record<string, { security?: unknown }>> }
    expect(doc.paths['/api/v1/api-keys']?.post?.security).toEqual([{ bearerAuth: ['api-keys:manage'] }])
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/api/v1/me', '/api/v1/api-keys/{id}/rotate', '/api/v1/wallet/register-public-key']))
    expect(logs.text()).not.toContain(key.slice(12))
  })
})
