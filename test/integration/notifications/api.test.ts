/**
 * GET /api/v1/notifications and POST /api/v1/notifications/{id}/read over real HTTP with the
 * api-server's authenticator and rate limiter, on both databases.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import type { Db } from '../../../src/db/knex.js'
import { notificationRoutes } from '../../../src/http/routes/notifications.js'
import { createNotification, type NotificationKind } from '../../../src/notifications/notifications.js'
import { DIALECTS } from '../../helpers/db.js'
import { getJson, Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, TestClock } from '../auth/api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const KEYS = ['body', 'created_at', 'data', 'id', 'kind', 'read_at', 'title', 'user_id']

interface NotificationBody {
  id: string
  kind: string
  read_at: string | null
  [key: string]: unknown
}
interface PageBody {
  items: NotificationBody[]
  next_cursor: string | null
}

async function startApi(db: Db) {
  const clock = new TestClock(Date.parse('2026-06-01T10:00:00.000Z'))
  const { authenticate } = authenticatorFromSettings(
    {
      AUTH_PROVIDER: 'idp',
      AUTH_IDP_JWKS_URL: undefined,
      AUTH_IDP_ISSUER: undefined,
      AUTH_IDP_AUTHORIZED_PARTY: [],
      AUTH_CLOCK_SKEW: 30_000,
      AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json',
    },
    { db, now: clock.now, keySet: { cooldownMs: 0 } },
  )
  const limiter = createApiRateLimiter({ perMinute: 600, now: () => clock.ms })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, routes: notificationRoutes({ db, now: clock.now }) })
  const call = (method: string, path: string, key?: string) =>
    getJson(`${api.url}${path}`, { method, headers: key === undefined ? {} : { authorization: `Bearer ${key}` } })
  return { clock, call }
}

async function notify(db: Db, userId: string, kind: NotificationKind, at: Date, n = 0) {
  return createNotification(db, { userId, kind, title: `${kind} ${n}`, body: `body ${n}`, data: { payment_id: `p-${n}`, failure_reason: null } }, at)
}

describe.each(DIALECTS)('notifications API on %s', (dialect) => {
  it('lists only the caller\'s own notifications, newest first, page by page, and only unread ones on request', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const bob = await newUser(db)
    const admin = await newUser(db, { admin: true })
    const aliceKey = (await newKey(db, alice.id, { scopes: ['nodes:read'], now: api.clock.now() })).key
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true, now: api.clock.now() })).key
    const mine = []
    for (let i = 0; i < 5; i++) mine.push(await notify(db, alice.id, i % 2 === 0 ? 'payment_failed' : 'subscription_expiring', new Date(api.clock.ms + i * 1_000), i))
    await notify(db, bob.id, 'payment_failed', api.clock.now(), 99)

    const first = await api.call('GET', '/api/v1/notifications?limit=2', aliceKey)
    expect(first.status).toBe(200)
    const page1 = first.body as PageBody
    expect(Object.keys(page1.items[0] as object).sort()).toEqual(KEYS)
    expect(page1.items.map((n) => n.id)).toEqual([mine[4]?.id, mine[3]?.id])
    expect(page1.items[0]).toEqual({ ...mine[4], read_at: null })
    const rest = await api.call('GET', `/api/v1/notifications?limit=10&cursor=${page1.next_cursor}`, aliceKey)
    expect((rest.body as PageBody).items.map((n) => n.id)).toEqual([mine[2]?.id, mine[1]?.id, mine[0]?.id])
    expect((rest.body as PageBody).next_cursor).toBeNull()

    // An admin sees their own (none), not everyone's.
    expect(((await api.call('GET', '/api/v1/notifications', adminKey)).body as PageBody).items).toEqual([])

    api.clock.advance(60_000)
    const read = await api.call('POST', `/api/v1/notifications/${mine[3]?.id}/read`, aliceKey)
    expect(read.status).toBe(200)
    expect((read.body as NotificationBody).read_at).toBe(api.clock.now().toISOString())
    // Reading again keeps the first time.
    api.clock.advance(60_000)
    const again = await api.call('POST', `/api/v1/notifications/${mine[3]?.id}/read`, aliceKey)
    expect((again.body as NotificationBody).read_at).toBe(new Date(api.clock.ms - 60_000).toISOString())

    const unread = await api.call('GET', '/api/v1/notifications?unread=true', aliceKey)
    expect((unread.body as PageBody).items.map((n) => n.id)).toEqual([mine[4]?.id, mine[2]?.id, mine[1]?.id, mine[0]?.id])
    const all = await api.call('GET', '/api/v1/notifications?unread=false', aliceKey)
    expect((all.body as PageBody).items).toHaveLength(5)
    const bad = await api.call('GET', '/api/v1/notifications?unread=yes', aliceKey)
    expect(bad.status).toBe(400)
    expect(isErrorBody(bad.body)).toBe(true)
  })

  it('answers 404 for another user\'s notification exactly as for a missing one, and leaves it unread', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const bob = await newUser(db)
    const bobKey = (await newKey(db, bob.id, { scopes: ['*'], now: api.clock.now() })).key
    const alices = await notify(db, alice.id, 'payment_canceled', api.clock.now())

    const foreign = await api.call('POST', `/api/v1/notifications/${alices.id}/read`, bobKey)
    const missing = await api.call('POST', '/api/v1/notifications/00000000-0000-4000-8000-000000000000/read', bobKey)
    const malformed = await api.call('POST', '/api/v1/notifications/not-an-id/read', bobKey)
    for (const res of [foreign, missing, malformed]) {
      expect(res.status).toBe(404)
      expect(isErrorBody(res.body)).toBe(true)
    }
    expect(foreign.body).toEqual(missing.body)
    expect(await db('notifications').where({ id: alices.id }).first('read_at')).toEqual({ read_at: null })
  })

  it('answers 401 without a valid credential', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const n = await notify(db, alice.id, 'payment_failed', api.clock.now())
    for (const res of [
      await api.call('GET', '/api/v1/notifications'),
      await api.call('GET', '/api/v1/notifications', 'np_not_a_real_key'),
      await api.call('POST', `/api/v1/notifications/${n.id}/read`),
    ]) {
      expect(res.status).toBe(401)
      expect(isErrorBody(res.body)).toBe(true)
    }
  })
})
