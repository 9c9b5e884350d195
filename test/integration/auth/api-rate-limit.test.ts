import { afterEach, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, TestClock } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

describe.each(DIALECTS)('API rate limit on %s', (dialect) => {
  it('answers 429 with Retry-After per caller, and recovers as the clock moves', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(Date.parse('2030-01-01T00:00:00Z'))
    const api = await startAuthApi(resources, db, { perMinute: 3, clock })
    const alice = await newUser(db)
    const bob = await newUser(db)
    const aliceKeys = [await newKey(db, alice.id, { now: clock.now() }), await newKey(db, alice.id, { now: clock.now() })]
    const bobKey = await newKey(db, bob.id, { now: clock.now() })
    const me = (key: string) => api.call('GET', '/api/v1/me', { bearer: key })

    // Failed authentication costs the caller nothing (and names no caller to charge).
    for (let i = 0; i < 5; i++) expect((await api.call('GET', '/api/v1/me', { bearer: 'np_nope' })).status).toBe(401)

    // Burst = the per-minute budget, shared by every credential of one user.
    expect((await me(aliceKeys[0]!.key)).status).toBe(200)
    expect((await me(aliceKeys[1]!.key)).status).toBe(200)
    expect((await me(aliceKeys[0]!.key)).status).toBe(200)
    const limited = await me(aliceKeys[1]!.key)
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toBe('20')
    expect(isErrorBody(limited.body)).toBe(true)
    expect(limited.body).toMatchObject({ error: 'rate limit exceeded' })
    expect((limited.body as { details: string }).details).toContain('3 requests per minute')

    // Another caller is not affected.
    expect((await me(bobKey.key)).status).toBe(200)

    clock.advance(19_000)
    const still = await me(aliceKeys[0]!.key)
    expect(still.status).toBe(429)
    expect(still.headers.get('retry-after')).toBe('1')
    clock.advance(1_000)
    expect((await me(aliceKeys[0]!.key)).status).toBe(200)
    expect((await me(aliceKeys[0]!.key)).status).toBe(429)

    // A full minute idle refills the whole burst, never more.
    clock.advance(10 * 60_000)
    for (let i = 0; i < 3; i++) expect((await me(aliceKeys[0]!.key)).status).toBe(200)
    expect((await me(aliceKeys[0]!.key)).status).toBe(429)
  })
})
