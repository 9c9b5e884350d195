import { afterEach, describe, expect, it } from 'vitest'
import { hashApiKey, LAST_USED_RESOLUTION_MS, revokeApiKey } from '../../../src/auth/api-keys.js'
import { setAdmin } from '../../../src/auth/users.js'
import { toDateOrNull } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, TestClock, type AuthApi } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const HOUR = 3_600_000

interface Endpoint {
  name: string
  method: string
  /** `:id` is replaced by a key id. */
  path: string
  body?: unknown
  /** Needs `api-keys:manage`; otherwise any authenticated caller. */
  scoped: boolean
  /** Status for a caller with a working credential and the right scope, on its own key. */
  ok: number
}

const ENDPOINTS: Endpoint[] = [
  { name: 'create', method: 'POST', path: '/api/v1/api-keys', body: { name: 'ci', scopes: ['nodes:read'] }, scoped: true, ok: 201 },
  { name: 'list', method: 'GET', path: '/api/v1/api-keys', scoped: true, ok: 200 },
  { name: 'get', method: 'GET', path: '/api/v1/api-keys/:id', scoped: true, ok: 200 },
  { name: 'rotate', method: 'POST', path: '/api/v1/api-keys/:id/rotate', scoped: true, ok: 201 },
  { name: 'revoke', method: 'POST', path: '/api/v1/api-keys/:id/revoke', scoped: true, ok: 200 },
  { name: 'delete', method: 'DELETE', path: '/api/v1/api-keys/:id', scoped: true, ok: 204 },
  { name: 'me', method: 'GET', path: '/api/v1/me', scoped: false, ok: 200 },
  // An empty message passes authentication and fails validation: 400 shows the caller got in.
  { name: 'wallet', method: 'POST', path: '/api/v1/wallet/register-public-key', body: { message: '', signature: '' }, scoped: false, ok: 400 },
]

async function setup(db: Db, api: AuthApi) {
  const user = await newUser(db)
  const other = await newUser(db)
  const now = api.clock.now()
  const good = await newKey(db, user.id, { scopes: ['api-keys:manage', 'nodes:read'], now })
  const target = await newKey(db, user.id, { scopes: ['nodes:read'], now })
  const narrow = await newKey(db, user.id, { scopes: ['nodes:read'], now })
  const expired = await newKey(db, user.id, { now: new Date(now.getTime() - 3 * HOUR), expiresAt: new Date(now.getTime() - HOUR) })
  const revoked = await newKey(db, user.id, { now })
  await revokeApiKey(db, user.id, revoked.id, now)
  const othersKey = await newKey(db, other.id, { now })
  return { user, other, good, target, narrow, expired, revoked, othersKey }
}

describe.each(DIALECTS)('API key endpoints on %s', (dialect) => {
  it.each(ENDPOINTS)('$name: no credentials, malformed, expired, revoked, wrong scope, other user', async (ep) => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const path = (id: string) => ep.path.replace(':id', id)
    const send = (init: { bearer?: string; apiKey?: string; headers?: Record<string, string> }, id = s.target.id) =>
      api.call(ep.method, path(id), { ...init, ...(ep.body !== undefined ? { body: ep.body } : {}) })

    const none = await send({})
    expect(none.status).toBe(401)
    expect(isErrorBody(none.body)).toBe(true)
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer realm="nodeplane"/)

    for (const init of [
      { bearer: 'np_short' },
      { bearer: `np_${'A'.repeat(43)}` },
      { bearer: 'not-a-jwt' },
      { bearer: 'eyJhbGciOiJSUzI1NiJ9.eyJ9.c2ln' },
      { headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } },
      { apiKey: 'definitely-not-a-key' },
    ]) {
      const res = await send(init)
      expect(res.status, JSON.stringify(init)).toBe(401)
      expect(isErrorBody(res.body)).toBe(true)
      expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"')
    }

    const expired = await send({ bearer: s.expired.key })
    expect(expired.status).toBe(401)
    expect(expired.body).toEqual({ error: 'invalid API key', details: 'the API key has expired' })

    const revoked = await send({ apiKey: s.revoked.key })
    expect(revoked.status).toBe(401)
    expect(revoked.body).toEqual({ error: 'invalid API key', details: 'the API key has been revoked' })

    const narrow = await send({ bearer: s.narrow.key })
    if (ep.scoped) {
      expect(narrow.status).toBe(403)
      expect(isErrorBody(narrow.body)).toBe(true)
      expect((narrow.body as { details: string }).details).toContain('api-keys:manage')
    } else {
      expect(narrow.status).toBe(ep.ok)
    }

    if (ep.path.includes(':id')) {
      const foreign = await send({ bearer: s.good.key }, s.othersKey.id)
      expect(foreign.status).toBe(404)
      expect(isErrorBody(foreign.body)).toBe(true)
      // Untouched: the other user's key still works.
      expect((await api.call('GET', '/api/v1/me', { bearer: s.othersKey.key })).status).toBe(200)
      const unknown = await send({ bearer: s.good.key }, '00000000-0000-4000-8000-000000000000')
      expect(unknown.status).toBe(404)
      // Another user's key and a key that does not exist answer alike.
      const anonymised = (body: unknown, id: string) => JSON.stringify(body).replaceAll(id, '<id>')
      expect(anonymised(foreign.body, s.othersKey.id)).toBe(anonymised(unknown.body, '00000000-0000-4000-8000-000000000000'))
      const malformedId = await send({ bearer: s.good.key }, 'not-a-uuid')
      expect(malformedId.status).toBe(400)
      expect((malformedId.body as { details: string }).details).toContain('params.id')
    }

    // The same credential, both headers.
    expect((await send({ bearer: s.good.key })).status).toBe(ep.ok)
  })

  it('creates a key whose plaintext is shown once and which then authenticates', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const manager = await newKey(db, user.id, { scopes: ['api-keys:manage', '*'], now: api.clock.now() })
    api.clock.advance(1000)
    const expiresAt = new Date(api.clock.ms + 48 * HOUR).toISOString()
    const created = await api.call('POST', '/api/v1/api-keys', { apiKey: manager.key, body: { name: ' deploy bot ', scopes: ['nodes:read', 'nodes:write', 'nodes:read'], expires_at: expiresAt } })
    expect(created.status).toBe(201)
    // The one answer carrying the plaintext must not be kept by any cache on the way.
    expect(created.headers.get('cache-control')).toBe('no-store')
    const body = created.body as Record<string, unknown>
    expect(Object.keys(body).sort()).toEqual(['created_at', 'expires_at', 'id', 'key', 'key_prefix', 'name', 'scopes'])
    expect(body).toMatchObject({ name: 'deploy bot', scopes: ['nodes:read', 'nodes:write'], expires_at: expiresAt })
    expect(body.key).toMatch(/^np_[A-Za-z0-9_-]{43}$/)
    expect(String(body.key).startsWith(String(body.key_prefix))).toBe(true)

    const me = await api.call('GET', '/api/v1/me', { bearer: String(body.key) })
    expect(me.status).toBe(200)
    expect(me.body).toMatchObject({ user_id: user.id, email: user.email, is_admin: false, scopes: ['nodes:read', 'nodes:write'], auth_method: 'api_key', api_key_id: body.id })

    const one = await api.call('GET', `/api/v1/api-keys/${String(body.id)}`, { apiKey: manager.key })
    expect(one.status).toBe(200)
    expect(Object.keys(one.body as object).sort()).toEqual(['created_at', 'expires_at', 'id', 'key_prefix', 'last_used_at', 'name', 'revoked_at', 'scopes', 'status'])
    expect(one.body).toMatchObject({ status: 'active', revoked_at: null, last_used_at: new Date(api.clock.ms).toISOString() })

    const list = await api.call('GET', '/api/v1/api-keys', { apiKey: manager.key })
    expect(list.status).toBe(200)
    const text = JSON.stringify(list.body)
    expect(text).not.toContain(String(body.key))
    expect(text).not.toContain(hashApiKey(String(body.key)))
    expect(text).not.toContain('key_hash')
    expect((list.body as { items: { id: string }[] }).items.map((i) => i.id)).toEqual([body.id, manager.id])
  })

  it('rejects invalid creations with 400 naming the field', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const admin = await newUser(db, { admin: true })
    const key = await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })
    const cases: [unknown, string][] = [
      [{ name: 'x', scopes: ['nodes:read', 'admin'] }, 'body.scopes[1]: admin cannot be given'],
      [{ name: 'x', scopes: ['root'] }, 'body.scopes[0]: unknown scope "root"'],
      [{ name: 'x', scopes: [] }, 'body.scopes: at least one scope is required'],
      [{ name: 'x'.repeat(101), scopes: ['*'] }, 'body.name'],
      [{ name: '   ', scopes: ['*'] }, 'body.name'],
      [{ scopes: ['*'] }, 'body.name: Required'],
      [{ name: 'x', scopes: ['*'], expires_at: 'tomorrow' }, 'body.expires_at'],
      [{ name: 'x', scopes: ['*'], expires_at: new Date(api.clock.ms + HOUR - 1000).toISOString() }, 'body.expires_at: must be at least 1 hour in the future'],
    ]
    for (const [body, details] of cases) {
      const res = await api.call('POST', '/api/v1/api-keys', { bearer: key.key, body })
      expect(res.status, JSON.stringify(body)).toBe(400)
      expect((res.body as { details: string }).details).toContain(details)
    }
    expect(await db('api_keys').count({ n: '*' }).first()).toMatchObject({ n: expect.anything() })
    expect(Number(((await db('api_keys').count({ n: '*' }).first()) as { n: unknown }).n)).toBe(1)
  })

  it('lets a key give only scopes it holds itself (403 otherwise), on creation and rotation', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const narrow = await newKey(db, user.id, { scopes: ['api-keys:manage', 'nodes:read'] })
    const wide = await newKey(db, user.id, { scopes: ['*'] })

    const escalate = await api.call('POST', '/api/v1/api-keys', { bearer: narrow.key, body: { name: 'x', scopes: ['nodes:read', 'payments:write'] } })
    expect(escalate.status).toBe(403)
    expect((escalate.body as { details: string }).details).toContain('"payments:write"')
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: narrow.key, body: { name: 'x', scopes: ['*'] } })).status).toBe(403)
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: narrow.key, body: { name: 'x', scopes: ['nodes:read'] } })).status).toBe(201)
    // Rotating a wider key would hand its scopes to the narrow one.
    expect((await api.call('POST', `/api/v1/api-keys/${wide.id}/rotate`, { bearer: narrow.key })).status).toBe(403)
    expect((await api.call('GET', '/api/v1/me', { bearer: wide.key })).status).toBe(200)
    // `*` covers every scope but admin; a JWT caller holds them all (see api-jwt tests).
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: wide.key, body: { name: 'y', scopes: ['payments:write', '*'] } })).status).toBe(201)
    expect((await api.call('POST', `/api/v1/api-keys/${narrow.id}/rotate`, { bearer: wide.key })).status).toBe(201)
  })

  it('allows at most 50 active keys under 60 concurrent creations', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const manager = await newKey(db, user.id, { scopes: ['api-keys:manage', '*'] })
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) => api.call('POST', '/api/v1/api-keys', { bearer: manager.key, body: { name: `k${i}`, scopes: ['nodes:read'] } })),
    )
    const statuses = results.map((r) => r.status)
    // The manager key itself is one of the 50.
    expect(statuses.filter((s) => s === 201)).toHaveLength(49)
    expect(statuses.filter((s) => s === 409)).toHaveLength(11)
    for (const r of results.filter((r) => r.status === 409)) expect(isErrorBody(r.body)).toBe(true)
    const active = await db('api_keys').where({ user_id: user.id }).whereNull('revoked_at').count({ n: '*' }).first()
    expect(Number((active as { n: unknown }).n)).toBe(50)

    // A revoked key frees a place; the limit counts active keys only.
    const anyKey = results.find((r) => r.status === 201)?.body as { id: string }
    expect((await api.call('POST', `/api/v1/api-keys/${anyKey.id}/revoke`, { bearer: manager.key })).status).toBe(200)
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: manager.key, body: { name: 'again', scopes: ['*'] } })).status).toBe(201)
    expect((await api.call('POST', '/api/v1/api-keys', { bearer: manager.key, body: { name: 'over', scopes: ['*'] } })).status).toBe(409)
  })

  it('rotates in one step: the new key works, the old one is dead; a revoked key cannot be rotated', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const old = await newKey(db, user.id, { scopes: ['api-keys:manage', 'nodes:read'], expiresAt: new Date(api.clock.ms + 10 * HOUR), now: api.clock.now() })

    const rotated = await api.call('POST', `/api/v1/api-keys/${old.id}/rotate`, { bearer: old.key })
    expect(rotated.status).toBe(201)
    expect(rotated.headers.get('cache-control')).toBe('no-store')
    const fresh = rotated.body as { id: string; key: string; scopes: string[]; expires_at: string; name: string }
    expect(fresh.id).not.toBe(old.id)
    expect(fresh).toMatchObject({ name: 'test key', scopes: ['api-keys:manage', 'nodes:read'], expires_at: new Date(api.clock.ms + 10 * HOUR).toISOString() })

    expect((await api.call('GET', '/api/v1/me', { bearer: fresh.key })).status).toBe(200)
    const dead = await api.call('GET', '/api/v1/me', { bearer: old.key })
    expect(dead.status).toBe(401)
    expect(dead.body).toEqual({ error: 'invalid API key', details: 'the API key has been revoked' })
    const row = await db('api_keys').where({ id: fresh.id }).first()
    expect(row.rotated_from_id).toBe(old.id)

    const again = await api.call('POST', `/api/v1/api-keys/${old.id}/rotate`, { bearer: fresh.key })
    expect(again.status).toBe(409)
    expect(isErrorBody(again.body)).toBe(true)

    // Two rotations of one key at once: exactly one wins.
    const twice = await Promise.all([1, 2].map(() => api.call('POST', `/api/v1/api-keys/${fresh.id}/rotate`, { bearer: fresh.key })))
    const statuses = twice.map((r) => r.status).sort()
    expect(statuses[0]).toBe(201)
    // The loser either saw the key revoked (409) or its own credential already dead (401).
    expect([401, 409]).toContain(statuses[1])
    const active = await db('api_keys').where({ user_id: user.id }).whereNull('revoked_at').count({ n: '*' }).first()
    expect(Number((active as { n: unknown }).n)).toBe(1)
  })

  it('never extends a key by rotating it: a key with 30 minutes left rotates into one with the same 30 minutes', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const expiresAt = new Date(api.clock.ms + 2 * HOUR)
    const old = await newKey(db, user.id, { scopes: ['api-keys:manage', 'nodes:read'], expiresAt, now: api.clock.now() })
    api.clock.advance(90 * 60_000)

    const rotated = await api.call('POST', `/api/v1/api-keys/${old.id}/rotate`, { bearer: old.key })
    expect(rotated.status).toBe(201)
    const fresh = rotated.body as { key: string; expires_at: string | null }
    expect(fresh.expires_at).toBe(expiresAt.toISOString())

    api.clock.advance(31 * 60_000)
    expect((await api.call('GET', '/api/v1/me', { bearer: fresh.key })).status).toBe(401)
  })

  it('rotation at the 50-key limit succeeds (the old key is revoked first, in the same transaction)', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const keys = []
    for (let i = 0; i < 50; i++) keys.push(await newKey(db, user.id, { scopes: ['api-keys:manage'] }))
    const first = keys[0] as { id: string; key: string }
    const res = await api.call('POST', `/api/v1/api-keys/${first.id}/rotate`, { bearer: first.key })
    expect(res.status).toBe(201)
  })

  it('revokes and deletes: revoked stays listed, deleted disappears, both stop working', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const manager = await newKey(db, user.id, { scopes: ['api-keys:manage'] })
    const a = await newKey(db, user.id)
    const b = await newKey(db, user.id)

    const revoked = await api.call('POST', `/api/v1/api-keys/${a.id}/revoke`, { bearer: manager.key })
    expect(revoked.status).toBe(200)
    expect(revoked.body).toMatchObject({ id: a.id, status: 'revoked', revoked_at: new Date(api.clock.ms).toISOString() })
    expect((await api.call('POST', `/api/v1/api-keys/${a.id}/revoke`, { bearer: manager.key })).status).toBe(200)
    expect((await api.call('GET', '/api/v1/me', { bearer: a.key })).status).toBe(401)

    const deleted = await api.call('DELETE', `/api/v1/api-keys/${b.id}`, { bearer: manager.key })
    expect(deleted.status).toBe(204)
    const gone = await api.call('GET', '/api/v1/me', { bearer: b.key })
    expect(gone.status).toBe(401)
    expect(gone.body).toEqual({ error: 'invalid API key', details: 'the API key has been deleted' })
    expect((await api.call('GET', `/api/v1/api-keys/${b.id}`, { bearer: manager.key })).status).toBe(404)
    expect((await api.call('DELETE', `/api/v1/api-keys/${b.id}`, { bearer: manager.key })).status).toBe(404)
    // Soft delete: the row is kept.
    expect(toDateOrNull((await db('api_keys').where({ id: b.id }).first()).deleted_at)).toEqual(api.clock.now())

    const list = (await api.call('GET', '/api/v1/api-keys', { bearer: manager.key })).body as { items: { id: string; status: string }[] }
    expect(list.items.map((i) => [i.id, i.status]).sort()).toEqual([
      [manager.id, 'active'],
      [a.id, 'revoked'],
    ].sort())
  })

  it('reports an expired key as expired and pages through keys with a cursor', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const manager = await newKey(db, user.id, { scopes: ['api-keys:manage', '*'], now: new Date(api.clock.ms - 10_000) })
    const ids: string[] = []
    for (let i = 0; i < 4; i++) {
      const created = await api.call('POST', '/api/v1/api-keys', { bearer: manager.key, body: { name: `k${i}`, scopes: ['*'], expires_at: new Date(api.clock.ms + 2 * HOUR).toISOString() } })
      ids.unshift((created.body as { id: string }).id)
      api.clock.advance(1000)
    }
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page = await api.call('GET', `/api/v1/api-keys?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { bearer: manager.key })
      expect(page.status).toBe(200)
      const body = page.body as { items: { id: string }[]; next_cursor: string | null }
      seen.push(...body.items.map((i) => i.id))
      cursor = body.next_cursor
    } while (cursor)
    expect(seen).toEqual([...ids, manager.id])
    expect((await api.call('GET', '/api/v1/api-keys?limit=0', { bearer: manager.key })).status).toBe(400)
    expect((await api.call('GET', '/api/v1/api-keys?cursor=zzz', { bearer: manager.key })).status).toBe(400)

    api.clock.advance(3 * HOUR)
    const one = await api.call('GET', `/api/v1/api-keys/${ids[0] as string}`, { bearer: manager.key })
    expect(one.body).toMatchObject({ status: 'expired' })
    expect((await api.call('POST', `/api/v1/api-keys/${ids[0] as string}/rotate`, { bearer: manager.key })).status).toBe(409)
  })

  it('writes last_used_at at most once a minute', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(Date.parse('2030-01-01T00:00:00Z'))
    const api = await startAuthApi(resources, db, { clock })
    const user = await newUser(db)
    const key = await newKey(db, user.id, { now: clock.now() })
    const lastUsed = async () => toDateOrNull((await db('api_keys').where({ id: key.id }).first()).last_used_at)

    expect(await lastUsed()).toBeNull()
    const t0 = clock.now()
    await api.call('GET', '/api/v1/me', { bearer: key.key })
    expect(await lastUsed()).toEqual(t0)
    clock.advance(LAST_USED_RESOLUTION_MS / 2)
    await api.call('GET', '/api/v1/me', { bearer: key.key })
    clock.advance(LAST_USED_RESOLUTION_MS / 2 - 1)
    await api.call('GET', '/api/v1/me', { bearer: key.key })
    expect(await lastUsed()).toEqual(t0)
    clock.advance(1)
    const t1 = clock.now()
    await api.call('GET', '/api/v1/me', { bearer: key.key })
    expect(await lastUsed()).toEqual(t1)
  })

  it('grants admin on a key only while its owner is an admin', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const admin = await newUser(db, { admin: true })
    const key = await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })
    const me = async () => (await api.call('GET', '/api/v1/me', { bearer: key.key })).body as { scopes: string[]; is_admin: boolean }
    expect(await me()).toMatchObject({ is_admin: true, scopes: ['*', 'admin'] })
    await setAdmin(db, admin.id, false)
    expect(await me()).toMatchObject({ is_admin: false, scopes: ['*'] })

    // A deleted user's keys stop working.
    await db('users').where({ id: admin.id }).delete()
    expect((await api.call('GET', '/api/v1/me', { bearer: key.key })).status).toBe(401)
  })

  it('never stores or logs a plaintext key', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const user = await newUser(db)
    const manager = await newKey(db, user.id, { scopes: ['api-keys:manage', '*'] })
    const plaintexts = [manager.key]
    for (let i = 0; i < 3; i++) {
      const res = await api.call('POST', '/api/v1/api-keys', { apiKey: manager.key, body: { name: `k${i}`, scopes: ['*'] } })
      plaintexts.push((res.body as { key: string }).key)
    }
    const rotated = await api.call('POST', `/api/v1/api-keys/${manager.id}/rotate`, { bearer: manager.key })
    const fresh = (rotated.body as { key: string }).key
    plaintexts.push(fresh)
    await api.call('GET', '/api/v1/me', { bearer: manager.key })
    await api.call('GET', '/api/v1/me', { headers: { authorization: `Bearer ${fresh}x` } })
    await api.call('GET', '/api/v1/api-keys', { bearer: fresh })

    const rows = (await db('api_keys').select('*')) as Record<string, unknown>[]
    expect(rows.length).toBe(5)
    const stored = rows.flatMap((r) => Object.values(r).filter((v): v is string => typeof v === 'string')).join('\n')
    for (const key of plaintexts) {
      expect(stored).not.toContain(key)
      // Not even the secret part without its prefix.
      expect(stored).not.toContain(key.slice(12))
      expect(stored).toContain(hashApiKey(key))
    }
    const logs = api.logs.text()
    expect(logs.length).toBeGreaterThan(0)
    for (const key of plaintexts) expect(logs).not.toContain(key.slice(12))
  })
})
