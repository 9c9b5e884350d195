import { afterEach, describe, expect, it } from 'vitest'
import { checkApiKey, revokeApiKey } from '../../../src/auth/api-keys.js'
import { setUserDisabled } from '../../../src/auth/users.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { newKey, newUser } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

describe.each(DIALECTS)('API key lookups under concurrency on %s', (dialect) => {
  it('answers 300 concurrent checks of many keys each with its own key: active, revoked, unknown, owner disabled', async () => {
    const { db } = await resources.database(dialect)
    const now = new Date()
    const user = await newUser(db)
    const disabled = await newUser(db)
    const active = await Promise.all(Array.from({ length: 10 }, () => newKey(db, user.id, { now })))
    const revoked = await Promise.all(Array.from({ length: 5 }, () => newKey(db, user.id, { now })))
    for (const key of revoked) await revokeApiKey(db, user.id, key.id, now)
    const ofDisabled = await newKey(db, disabled.id, { now })
    await setUserDisabled(db, disabled.id, true, now)
    const unknown = `np_${'A'.repeat(43)}`

    const cases = [
      ...active.map((k) => ({ key: k.key, expected: { ok: true, id: k.id } })),
      ...revoked.map((k) => ({ key: k.key, expected: { ok: false, reason: 'revoked' } })),
      { key: ofDisabled.key, expected: { ok: false, reason: 'user_disabled' } },
      { key: unknown, expected: { ok: false, reason: 'unknown' } },
      { key: 'np_short', expected: { ok: false, reason: 'malformed' } },
    ]
    const calls = Array.from({ length: 300 }, (_, i) => cases[i % cases.length] as (typeof cases)[number])
    const results = await Promise.all(calls.map((c) => checkApiKey(db, c.key, now)))
    results.forEach((result, i) => {
      const { expected } = calls[i] as (typeof calls)[number]
      if (result.ok) expect({ ok: true, id: result.apiKey.id, owner: result.owner.id }).toEqual({ ...expected, owner: user.id })
      else expect(result).toEqual(expected)
    })
  })

  it('a check that arrives while a lookup has already read the key, and after its revocation, is refused: it is never answered by that lookup', async () => {
    const { db } = await resources.database(dialect)
    const user = await newUser(db)
    const key = await newKey(db, user.id)
    // The lookup's query runs at once, but its rows are handed back only when released: the key
    // is read active, then revoked while that lookup is still on its way.
    let read!: () => void
    const wasRead = new Promise<void>((resolve) => (read = resolve))
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    const held = new Proxy(db, {
      get(target, property, receiver) {
        if (property !== 'raw') return Reflect.get(target, property, receiver) as unknown
        return (...args: Parameters<Db['raw']>) =>
          target.raw(...args).then(async (rows: unknown) => {
            read()
            await released
            return rows
          })
      },
    })
    const first = checkApiKey(held, key.key)
    await wasRead
    await revokeApiKey(db, user.id, key.id)
    const second = checkApiKey(held, key.key)
    release()
    expect((await first).ok).toBe(true)
    expect(await second).toEqual({ ok: false, reason: 'revoked' })
  })
})
