/**
 * Failed authentication is throttled per client address (docs/auth.md, "Failed authentication"):
 * after AUTH_FAILURE_LIMIT_PER_MINUTE refused credentials from one address, its requests are
 * answered 429 before any database read; other addresses are untouched; the budget is shared
 * through the database by api-server instances; anonymous calls are not failures.
 */
import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { newKey, newUser, startAuthApi, TestClock, type AuthApi } from './api-harness.js'

const LIMIT = 5
const randomKey = () => `np_${crypto.randomBytes(32).toString('base64url')}`

/** Counts the statements `db` sends while `run` runs. */
async function queriesDuring(db: Db, run: () => Promise<void>): Promise<number> {
  let n = 0
  const count = () => {
    n += 1
  }
  db.on('query', count)
  try {
    await run()
  } finally {
    db.off('query', count)
  }
  return n
}

function from(api: AuthApi, address: string, credential: { apiKey?: string; bearer?: string } = {}) {
  return api.call('GET', '/api/v1/me', { ...credential, headers: { 'X-Forwarded-For': `${crypto.randomUUID()}, ${address}` } })
}

describe.each(DIALECTS)('failed authentication throttle on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  it('answers an address 429 without a database read once it has used up its failures; another address still gets in', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock()
    const api = await startAuthApi(resources, db, { clock, failureLimitPerMinute: LIMIT, trustProxy: true })
    const user = await newUser(db)
    const good = await newKey(db, user.id, { now: clock.now() })

    // Bad API keys and garbled bearer tokens alike count; each is still looked at and refused.
    for (let i = 0; i < LIMIT; i++) {
      const res = await from(api, '203.0.113.7', i % 2 === 0 ? { apiKey: randomKey() } : { bearer: 'not-a-jwt' })
      expect(res.status).toBe(401)
    }
    let refused: Awaited<ReturnType<typeof from>> | undefined
    const statements = await queriesDuring(db, async () => {
      for (let i = 0; i < 20; i++) {
        refused = await from(api, '203.0.113.7', { apiKey: randomKey() })
        expect(refused.status).toBe(429)
      }
      // A valid key from the throttled address waits too: it cannot be told apart without a lookup.
      expect((await from(api, '203.0.113.7', { apiKey: good.key })).status).toBe(429)
    })
    expect(statements).toBe(0)
    expect(refused?.body).toMatchObject({ error: 'too many failed authentications', details: expect.stringContaining(`${LIMIT} failed authentications per minute`) })
    expect(Number(refused?.headers.get('retry-after'))).toBe(12)

    // Another client (the forged leftmost entries above do not matter) gets in at once.
    expect((await from(api, '198.51.100.9', { apiKey: good.key })).status).toBe(200)
    // Anonymous calls are not failed authentications: 401, never 429, for a fresh address.
    for (let i = 0; i < LIMIT + 2; i++) expect((await from(api, '192.0.2.1')).status).toBe(401)

    // The bucket refills: one failure's worth per 60 s / LIMIT.
    clock.advance(12_000)
    expect((await from(api, '203.0.113.7', { apiKey: good.key })).status).toBe(200)
  })

  it('shares the budget through the database: a second api-server lets the address fail once more, then 429', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock()
    const one = await startAuthApi(resources, db, { clock, failureLimitPerMinute: LIMIT, trustProxy: true })
    const two = await startAuthApi(resources, db, { clock, failureLimitPerMinute: LIMIT, trustProxy: true })
    for (let i = 0; i < LIMIT; i++) expect((await from(one, '203.0.113.7', { apiKey: randomKey() })).status).toBe(401)
    expect((await from(one, '203.0.113.7', { apiKey: randomKey() })).status).toBe(429)

    // Instance two has not seen the address; the shared bucket has, and refuses the next failure.
    expect((await from(two, '203.0.113.7', { apiKey: randomKey() })).status).toBe(401)
    const statements = await queriesDuring(db, async () => {
      expect((await from(two, '203.0.113.7', { apiKey: randomKey() })).status).toBe(429)
    })
    expect(statements).toBe(0)
    const row = (await db('auth_rate_buckets').where({ client_key: 'auth-failure:203.0.113.7' }).first()) as { admitted: number } | undefined
    expect(Number(row?.admitted)).toBe(0)
  })
})
