import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { durationEnd } from '../../../src/subscriptions/subscriptions.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const SUBSCRIPTION_KEYS = [
  'chain_profile_id',
  'created_at',
  'duration',
  'expires_at',
  'grace_period_expires_at',
  'id',
  'node_type',
  'payment_id',
  'status',
  'updated_at',
  'user_id',
]
const HIDDEN = ['provider', 'region', 'instance_type']
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000'

interface SubscriptionBody {
  id: string
  status: string
  [key: string]: unknown
}
interface PageBody {
  items: SubscriptionBody[]
  next_cursor: string | null
}

const ids = (page: unknown) => (page as PageBody).items.map((s) => s.id)
const details = (body: unknown) => (body as { details: string }).details

async function setup(db: Db, api: AuthApi) {
  const alice = await newUser(db)
  const bob = await newUser(db)
  const root = await newUser(db, { admin: true })
  const at = api.clock.now()
  return {
    alice,
    bob,
    root,
    aliceKey: (await newKey(db, alice.id, { scopes: ['subscriptions:read', 'subscriptions:write'], now: at })).key,
    aliceReader: (await newKey(db, alice.id, { scopes: ['subscriptions:read'], now: at })).key,
    aliceNoScope: (await newKey(db, alice.id, { scopes: ['nodes:read'], now: at })).key,
    bobKey: (await newKey(db, bob.id, { scopes: ['*'], now: at })).key,
    adminKey: (await newKey(db, root.id, { scopes: ['*', 'admin'], admin: true, now: at })).key,
    rootUserKey: (await newKey(db, root.id, { scopes: ['subscriptions:read', 'subscriptions:write'], now: at })).key,
  }
}

const DEVNET_FULL_1M = { chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }

describe.each(DIALECTS)('subscriptions API on %s', (dialect) => {
  it('creates a pending_payment subscription (201), then returns the equal pending one (200)', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const at = api.clock.now()

    const first = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })
    expect(first.status).toBe(201)
    expect(Object.keys(first.body as object).sort()).toEqual(SUBSCRIPTION_KEYS)
    expect(first.body).toEqual({
      id: expect.any(String),
      user_id: s.alice.id,
      chain_profile_id: 'devnet',
      node_type: 'full',
      duration: '1m',
      status: 'pending_payment',
      expires_at: durationEnd(at, '1m').toISOString(),
      grace_period_expires_at: null,
      payment_id: null,
      created_at: at.toISOString(),
      updated_at: at.toISOString(),
    })
    const id = (first.body as SubscriptionBody).id
    // Resolved from the devnet profile (provider/region per duration, instance type per node type), stored but never shown.
    expect(await db('subscriptions').where({ id }).first('provider', 'region', 'instance_type')).toEqual({ provider: 'local', region: 'local', instance_type: 'local.small' })

    api.clock.advance(60_000)
    const again = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)

    // Anything that differs makes a new one: another duration, node type, or user.
    const other = [
      await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: { ...DEVNET_FULL_1M, duration: '3m' } }),
      await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: { ...DEVNET_FULL_1M, node_type: 'archive' } }),
      await api.call('POST', '/api/v1/subscriptions', { bearer: s.bobKey, body: DEVNET_FULL_1M }),
    ]
    for (const res of other) expect(res.status).toBe(201)
    expect(new Set([id, ...other.map((r) => (r.body as SubscriptionBody).id)]).size).toBe(4)

    // Once the equal one is no longer pending (paid), a new one is created.
    await db('subscriptions').where({ id }).update({ status: 'active', payment_id: 'pay_1' })
    const afterPayment = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })
    expect(afterPayment.status).toBe(201)
    expect((afterPayment.body as SubscriptionBody).id).not.toBe(id)
    expect(Number((await db('subscriptions').where({ user_id: s.alice.id }).count({ n: '*' }).first())?.n)).toBe(4)
  })

  it('creates one subscription for identical concurrent requests', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const answers = await Promise.all(Array.from({ length: 8 }, () => api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })))
    const statuses = answers.map((a) => a.status).sort()
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 201])
    const returned = new Set(answers.map((a) => (a.body as SubscriptionBody).id))
    expect(returned.size).toBe(1)
    const rows = await db('subscriptions').where({ user_id: s.alice.id }).select('id')
    expect(rows.map((r: { id: string }) => r.id)).toEqual([...returned])
  })

  it('answers unknown chain profiles, node types and durations, and stray fields, with 400 naming the allowed values', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const cases: [Record<string, unknown>, string[]][] = [
      [{ ...DEVNET_FULL_1M, chain_profile_id: 'nochain' }, ['chain_profile_id must be one of: devnet']],
      [{ ...DEVNET_FULL_1M, node_type: 'validator' }, ['node_type must be one of: full, archive']],
      [{ ...DEVNET_FULL_1M, duration: '2m' }, ['duration', "'1w' | '2w' | '1m' | '3m' | '6m'"]],
      [{ chain_profile_id: 'devnet', node_type: 'full' }, ['duration']],
      [{ ...DEVNET_FULL_1M, provider: 'aws' }, ['provider']],
      [{ ...DEVNET_FULL_1M, chain_profile_id: '' }, ['chain_profile_id']],
    ]
    for (const [body, expected] of cases) {
      const res = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body })
      expect(res.status, JSON.stringify(body)).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
      for (const text of expected) expect(details(res.body), JSON.stringify(body)).toContain(text)
    }
    expect(Number((await db('subscriptions').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('refuses anonymous callers (401) and credentials without the scope (403); another user or unknown ids answer the same 404', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const mine = (await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })).body as SubscriptionBody

    const reads = ['/api/v1/subscriptions', `/api/v1/subscriptions/${mine.id}`]
    for (const path of reads) {
      expect((await api.call('GET', path)).status, path).toBe(401)
      const scopeless = await api.call('GET', path, { bearer: s.aliceNoScope })
      expect(scopeless.status, path).toBe(403)
      expect(details(scopeless.body)).toContain('subscriptions:read')
      expect((await api.call('GET', path, { bearer: s.aliceReader })).status, path).toBe(200)
    }
    expect((await api.call('POST', '/api/v1/subscriptions', { body: DEVNET_FULL_1M })).status).toBe(401)
    const readerWrites = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceReader, body: DEVNET_FULL_1M })
    expect(readerWrites.status).toBe(403)
    expect(details(readerWrites.body)).toContain('subscriptions:write')

    const own = await api.call('GET', `/api/v1/subscriptions/${mine.id}`, { bearer: s.aliceKey })
    expect(own.body).toEqual(mine)
    expect((await api.call('GET', `/api/v1/subscriptions/${mine.id.toUpperCase()}`, { bearer: s.aliceKey })).body).toEqual(mine)
    const asAdmin = await api.call('GET', `/api/v1/subscriptions/${mine.id}`, { bearer: s.adminKey })
    expect(asAdmin.status).toBe(200)
    expect(asAdmin.body).toEqual(mine)

    const foreign = await api.call('GET', `/api/v1/subscriptions/${mine.id}`, { bearer: s.bobKey })
    const unknown = await api.call('GET', `/api/v1/subscriptions/${UNKNOWN_ID}`, { bearer: s.aliceKey })
    const malformed = await api.call('GET', '/api/v1/subscriptions/not-a-uuid', { bearer: s.aliceKey })
    const notAdmin = await api.call('GET', `/api/v1/subscriptions/${mine.id}`, { bearer: s.rootUserKey })
    for (const res of [foreign, unknown, malformed, notAdmin]) {
      expect(res.status).toBe(404)
      expect(isErrorBody(res.body)).toBe(true)
      expect(res.body).toEqual(foreign.body)
    }
    expect(JSON.stringify(foreign.body)).not.toContain(mine.id)
  })

  it('never shows provider, region or instance_type, to users or admins', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const created = await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: { ...DEVNET_FULL_1M, node_type: 'archive' } })
    const id = (created.body as SubscriptionBody).id
    const internal = { provider: 'secret-cloud', region: 'moon-south-1', instance_type: 'm9.enormous' }
    await db('subscriptions').where({ id }).update(internal)
    const answers = [
      await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: { ...DEVNET_FULL_1M, node_type: 'archive' } }),
      await api.call('GET', `/api/v1/subscriptions/${id}`, { bearer: s.aliceKey }),
      await api.call('GET', `/api/v1/subscriptions/${id}`, { bearer: s.adminKey }),
      await api.call('GET', '/api/v1/subscriptions', { bearer: s.aliceKey }),
      await api.call('GET', '/api/v1/subscriptions', { bearer: s.adminKey }),
      await api.call('GET', `/api/v1/subscriptions?user_id=${s.alice.id}`, { bearer: s.adminKey }),
    ]
    for (const res of [created, ...answers]) {
      expect(res.status).toBeLessThan(300)
      const items = 'items' in (res.body as object) ? (res.body as PageBody).items : [res.body as SubscriptionBody]
      expect(items).toHaveLength(1)
      for (const item of items) {
        for (const field of HIDDEN) expect(item).not.toHaveProperty(field)
        expect(Object.keys(item).sort()).toEqual(SUBSCRIPTION_KEYS)
      }
    }
    for (const res of answers) for (const value of Object.values(internal)) expect(JSON.stringify(res.body)).not.toContain(value)

    const doc = (await api.call('GET', '/api/v1/openapi.json')).body as {
      paths: Record<string, Record<string, { security?: unknown }>>
      components: { schemas: Record<string, { properties: Record<string, unknown> }> }
    }
    expect(doc.paths['/api/v1/subscriptions']?.post?.security).toEqual([{ bearerAuth: ['subscriptions:write'] }])
    expect(doc.paths['/api/v1/subscriptions']?.get?.security).toEqual([{ bearerAuth: ['subscriptions:read'] }])
    expect(doc.paths['/api/v1/subscriptions/{id}']?.get?.security).toEqual([{ bearerAuth: ['subscriptions:read'] }])
    expect(Object.keys(doc.components.schemas.Subscription?.properties ?? {}).sort()).toEqual(SUBSCRIPTION_KEYS)
  })

  it("lists the caller's subscriptions only, filtered by status; an admin lists all and may filter by user", async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const t0 = api.clock.ms
    const a1 = await insertSubscription(db, s.alice.id, new Date(t0 + 1000))
    const b1 = await insertSubscription(db, s.bob.id, new Date(t0 + 2000))
    api.clock.advance(3000)
    const a2 = ((await api.call('POST', '/api/v1/subscriptions', { bearer: s.aliceKey, body: DEVNET_FULL_1M })).body as SubscriptionBody).id

    const list = async (query: string, key: string) => {
      const res = await api.call('GET', `/api/v1/subscriptions${query}`, { bearer: key })
      expect(res.status, query).toBe(200)
      return ids(res.body)
    }
    expect(await list('', s.aliceKey)).toEqual([a2, a1])
    expect(await list('?status=pending_payment', s.aliceKey)).toEqual([a2])
    expect(await list('?status=active', s.aliceKey)).toEqual([a1])
    expect(await list('?status=terminated', s.aliceKey)).toEqual([])
    expect(await list('', s.bobKey)).toEqual([b1])
    expect(await list('', s.rootUserKey)).toEqual([])
    expect(await list('', s.adminKey)).toEqual([a2, b1, a1])
    expect(await list('?status=active', s.adminKey)).toEqual([b1, a1])
    expect(await list(`?user_id=${s.bob.id}`, s.adminKey)).toEqual([b1])
    expect(await list(`?user_id=${s.alice.id}`, s.aliceKey)).toEqual([a2, a1])

    const other = await api.call('GET', `/api/v1/subscriptions?user_id=${s.bob.id}`, { bearer: s.aliceKey })
    expect(other.status).toBe(403)
    expect(details(other.body)).toContain('query.user_id')

    for (const [query, expected] of [
      ['status=sleeping', 'query.status'],
      ['user_id=42', 'query.user_id'],
      ['limit=0', 'query.limit'],
      ['limit=201', 'query.limit'],
      ['cursor=bm90LWEtY3Vyc29y', 'query.cursor'],
    ] as const) {
      const res = await api.call('GET', `/api/v1/subscriptions?${query}`, { bearer: s.adminKey })
      expect(res.status, query).toBe(400)
      expect(details(res.body), query).toContain(expected)
    }
  })

  it('pages newest first through every subscription exactly once (50 by default, at most 200)', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const t0 = api.clock.ms
    const created: { id: string; at: number }[] = []
    // Pairs share a created_at, so the id decides their order.
    for (let i = 0; i < 53; i++) {
      const at = t0 + Math.floor(i / 2) * 1000
      created.push({ id: await insertSubscription(db, s.alice.id, new Date(at)), at })
    }
    await insertSubscription(db, s.bob.id, new Date(t0 + 500))
    const expected = [...created].sort((x, y) => y.at - x.at || (y.id < x.id ? -1 : 1)).map((c) => c.id)

    const first = (await api.call('GET', '/api/v1/subscriptions', { bearer: s.aliceKey })).body as PageBody
    expect(first.items).toHaveLength(50)
    expect(first.next_cursor).toEqual(expect.any(String))
    const rest = (await api.call('GET', `/api/v1/subscriptions?cursor=${first.next_cursor}`, { bearer: s.aliceKey })).body as PageBody
    expect(rest.next_cursor).toBeNull()
    expect([...ids(first), ...ids(rest)]).toEqual(expected)

    const seen: string[] = []
    let cursor: string | null = null
    for (let guard = 0; guard < 30; guard++) {
      const res = await api.call('GET', `/api/v1/subscriptions?limit=7${cursor ? `&cursor=${cursor}` : ''}`, { bearer: s.aliceKey })
      seen.push(...ids(res.body))
      cursor = (res.body as PageBody).next_cursor
      if (cursor === null) break
    }
    expect(seen).toEqual(expected)
    expect(((await api.call('GET', '/api/v1/subscriptions?limit=200', { bearer: s.aliceKey })).body as PageBody).items).toHaveLength(53)
  })
})

describe('durationEnd (the placeholder expires_at)', () => {
  it('adds weeks as days and months as calendar months, clamped to the month end', () => {
    const at = (iso: string) => new Date(iso)
    expect(durationEnd(at('2026-01-31T10:00:00.000Z'), '1w').toISOString()).toBe('2026-02-07T10:00:00.000Z')
    expect(durationEnd(at('2026-01-31T10:00:00.000Z'), '2w').toISOString()).toBe('2026-02-14T10:00:00.000Z')
    expect(durationEnd(at('2026-01-31T10:00:00.000Z'), '1m').toISOString()).toBe('2026-02-28T10:00:00.000Z')
    expect(durationEnd(at('2026-01-15T10:00:00.000Z'), '3m').toISOString()).toBe('2026-04-15T10:00:00.000Z')
    expect(durationEnd(at('2026-08-31T10:00:00.000Z'), '6m').toISOString()).toBe('2027-02-28T10:00:00.000Z')
  })
})
