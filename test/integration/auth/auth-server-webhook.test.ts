/**
 * POST /webhooks/idp (spec: Authentication): Standard Webhooks signatures over the raw body,
 * timestamp tolerance, replayed ids, and the three user events. Both databases.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { signWebhook } from '../../../src/auth/webhooks.js'
import { findUserByExternalAuthId } from '../../../src/auth/users.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { deliverWebhook, keyOf, type WebhookDelivery, startTestAuthServer, TestClock, userCreatedEvent, webhookSecret } from './auth-server-support.js'

describeEachDialectConcurrently('auth server identity-provider webhook on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function setup(settings: { AUTH_PROVIDER?: 'idp' | 'both' | 'siwe'; AUTH_RATE_LIMIT_PER_MINUTE?: number } = {}) {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const secret = webhookSecret()
    const server = await startTestAuthServer(resources, t.db, {
      clock,
      settings: { AUTH_PROVIDER: 'idp', AUTH_IDP_WEBHOOK_SIGNING_SECRET: secret, ...settings },
    })
    return { db: t.db, clock, secret, url: server.url, logs: server.logs }
  }

  it('user.created with a valid signature creates the local user with its primary email', async () => {
    const { db, clock, secret, url } = await setup()
    const res = await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_2abc', 'ada@example.com') })
    expect(res).toEqual({ status: 200, body: { status: 'ok', outcome: 'user_created' } })
    const user = await findUserByExternalAuthId(db, 'user_2abc')
    expect(user).toMatchObject({ external_auth_id: 'user_2abc', email: 'ada@example.com', is_admin: false, wallet_address: null })
  })

  it('user.created for an existing external id changes nothing (skip)', async () => {
    const { db, clock, secret, url } = await setup()
    await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_1', 'one@example.com') })
    const again = await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_1', 'changed@example.com') })
    expect(again.body).toMatchObject({ outcome: 'user_exists' })
    expect((await findUserByExternalAuthId(db, 'user_1'))?.email).toBe('one@example.com')
  })

  it('accepts the svix-* header names', async () => {
    const { db, clock, secret, url } = await setup()
    const res = await deliverWebhook(url, { secret, timestamp: clock.seconds, prefix: 'svix', body: userCreatedEvent('user_svix', null) })
    expect(res.status).toBe(200)
    expect(await findUserByExternalAuthId(db, 'user_svix')).toMatchObject({ email: null })
  })

  it('passes when any of several v1 signatures matches (secret rotation), and fails when none does', async () => {
    const { db, clock, secret, url } = await setup()
    const body = userCreatedEvent('user_rot', null)
    const id = 'msg_rotation'
    const good = signWebhook(keyOf(secret), id, clock.seconds, JSON.stringify(body))
    const other = signWebhook(keyOf(webhookSecret()), id, clock.seconds, JSON.stringify(body))
    const none = await deliverWebhook(url, { secret, id, timestamp: clock.seconds, body, signatureHeader: `v1,${other} v2,${good}` })
    expect(none.status).toBe(401)
    const some = await deliverWebhook(url, { secret, id, timestamp: clock.seconds, body, signatureHeader: `v1,${other} v1,${good}` })
    expect(some.status).toBe(200)
    expect(await findUserByExternalAuthId(db, 'user_rot')).toBeDefined()
  })

  it('refuses with 401, writing nothing: tampered body, stale or future timestamp, missing headers, wrong secret, garbage', async () => {
    const { db, clock, secret, url } = await setup()
    const body = userCreatedEvent('user_x', 'x@example.com')
    const variants: Array<[string, Partial<WebhookDelivery>]> = [
      ['a tampered body', { rawBody: JSON.stringify(userCreatedEvent('user_evil', 'evil@example.com')) }],
      ['a timestamp 6 minutes old', { timestamp: clock.seconds - 360 }],
      ['a timestamp 6 minutes in the future', { timestamp: clock.seconds + 360 }],
      ['no webhook-signature header', { omit: ['signature'] }],
      ['no webhook-id header', { omit: ['id'] }],
      ['no webhook-timestamp header', { omit: ['timestamp'] }],
      ['a signature made with another secret', { secret: webhookSecret() }],
      ['a garbage signature header', { signatureHeader: 'v1,not-base64!!' }],
      ['a non-numeric timestamp', { signatureHeader: undefined, timestamp: Number.NaN }],
    ]
    for (const [name, variant] of variants) {
      const res = await deliverWebhook(url, { secret, timestamp: clock.seconds, body, ...variant })
      expect({ name, status: res.status }).toEqual({ name, status: 401 })
      expect(res.body).toMatchObject({ error: expect.any(String), details: expect.any(String) })
    }
    expect(Number((await db('users').count({ n: '*' }).first())?.n)).toBe(0)
    expect(Number((await db('idempotency_keys').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('accepts a timestamp within the 5 minute tolerance either way', async () => {
    const { clock, secret, url } = await setup()
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds - 290, body: userCreatedEvent('user_old', null) })).status).toBe(200)
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds + 290, body: userCreatedEvent('user_new', null) })).status).toBe(200)
  })

  it('a replayed webhook id is answered 200 without processing it again', async () => {
    const { db, clock, secret, url, logs } = await setup()
    const first = await deliverWebhook(url, { secret, id: 'msg_once', timestamp: clock.seconds, body: userCreatedEvent('user_once', 'once@example.com') })
    expect(first.body).toMatchObject({ outcome: 'user_created' })
    // The local user is removed; a re-run of the same delivery would create it again.
    await db('users').where({ external_auth_id: 'user_once' }).del()
    clock.advance(60_000)
    const replay = await deliverWebhook(url, { secret, id: 'msg_once', timestamp: clock.seconds, body: userCreatedEvent('user_once', 'once@example.com') })
    expect(replay).toEqual({ status: 200, body: { status: 'ok', outcome: 'duplicate' } })
    expect(await findUserByExternalAuthId(db, 'user_once')).toBeUndefined()
    expect(logs.lines.some((l) => l.msg === 'webhook id seen before: not processed again')).toBe(true)
  })

  it('user.updated changes the email when it changed, and is a no-op for an unknown user', async () => {
    const { db, clock, secret, url } = await setup()
    await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_u', 'before@example.com') })
    const updated = { ...(userCreatedEvent('user_u', 'after@example.com') as object), type: 'user.updated' }
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: updated })).body).toMatchObject({ outcome: 'user_updated' })
    expect((await findUserByExternalAuthId(db, 'user_u'))?.email).toBe('after@example.com')

    const same = { ...(userCreatedEvent('user_u', 'after@example.com') as object), type: 'user.updated' }
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: same })).body).toMatchObject({ outcome: 'user_unchanged' })

    const unknown = { ...(userCreatedEvent('user_nobody', 'nobody@example.com') as object), type: 'user.updated' }
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: unknown })).body).toMatchObject({ outcome: 'user_unknown' })
    expect(await findUserByExternalAuthId(db, 'user_nobody')).toBeUndefined()
  })

  it('user.updated does not take another local user\'s email', async () => {
    const { db, clock, secret, url } = await setup()
    await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_a', 'a@example.com') })
    await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_b', 'b@example.com') })
    const steal = { ...(userCreatedEvent('user_b', 'A@example.com') as object), type: 'user.updated' }
    expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: steal })).body).toMatchObject({ outcome: 'user_unchanged' })
    expect((await findUserByExternalAuthId(db, 'user_b'))?.email).toBe('b@example.com')
  })

  it('user.deleted is logged only: the local user stays', async () => {
    const { db, clock, secret, url, logs } = await setup()
    await deliverWebhook(url, { secret, timestamp: clock.seconds, body: userCreatedEvent('user_d', 'd@example.com') })
    const res = await deliverWebhook(url, { secret, timestamp: clock.seconds, body: { type: 'user.deleted', data: { id: 'user_d', deleted: true } } })
    expect(res.body).toMatchObject({ outcome: 'user_deleted_logged' })
    expect(await findUserByExternalAuthId(db, 'user_d')).toBeDefined()
    expect(logs.lines.some((l) => l.msg === 'identity provider deleted a user; the local user is kept' && l.externalAuthId === 'user_d')).toBe(true)
  })

  it('unknown event types are answered 200 and ignored', async () => {
    const { db, clock, secret, url } = await setup()
    const res = await deliverWebhook(url, { secret, timestamp: clock.seconds, body: { type: 'session.created', data: { id: 'sess_1' } } })
    expect(res).toEqual({ status: 200, body: { status: 'ok', outcome: 'ignored' } })
    expect(Number((await db('users').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('a signed but malformed body is 400, and the delivery is not recorded (the retry is processed)', async () => {
    const { db, clock, secret, url } = await setup()
    const id = 'msg_bad'
    const raw = '{"type":"user.created","data":'
    const signatureHeader = `v1,${signWebhook(keyOf(secret), id, clock.seconds, raw)}`
    const res = await deliverWebhook(url, { secret, id, timestamp: clock.seconds, body: null, rawBody: raw, signatureHeader })
    expect(res.status).toBe(400)
    const noId = await deliverWebhook(url, { secret, timestamp: clock.seconds, body: { type: 'user.created', data: { email_addresses: [] } } })
    expect(noId.status).toBe(400)
    expect(Number((await db('idempotency_keys').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('is not rate limited', async () => {
    const { clock, secret, url } = await setup({ AUTH_RATE_LIMIT_PER_MINUTE: 2 })
    for (let i = 0; i < 5; i++) {
      expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: { type: 'ping', data: {} } })).status).toBe(200)
    }
  })

  it('is mounted in mode both, not in mode siwe (404)', async () => {
    const both = await setup({ AUTH_PROVIDER: 'both' })
    expect((await deliverWebhook(both.url, { secret: both.secret, timestamp: both.clock.seconds, body: { type: 'ping', data: {} } })).status).toBe(200)
    const siwe = await setup({ AUTH_PROVIDER: 'siwe' })
    expect((await deliverWebhook(siwe.url, { secret: siwe.secret, timestamp: siwe.clock.seconds, body: { type: 'ping', data: {} } })).status).toBe(404)
  })

  it('without AUTH_IDP_WEBHOOK_SIGNING_SECRET it is not mounted (404) and the start logs a warning', async () => {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const server = await startTestAuthServer(resources, t.db, { clock, settings: { AUTH_PROVIDER: 'idp' } })
    const res = await deliverWebhook(server.url, { secret: webhookSecret(), timestamp: clock.seconds, body: userCreatedEvent('user_z', null) })
    expect(res.status).toBe(404)
    const warning = server.logs.lines.find((l) => l.level === 'warn' && String(l.msg).includes('AUTH_IDP_WEBHOOK_SIGNING_SECRET is not set'))
    expect(warning).toBeDefined()
    expect(Number((await t.db('users').count({ n: '*' }).first())?.n)).toBe(0)
  })
})
