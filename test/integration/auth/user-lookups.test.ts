import crypto from 'node:crypto'
import type { Knex } from 'knex'
import { afterEach, describe, expect, it } from 'vitest'
import { lookUpUserByExternalAuthId, lookUpUserById } from '../../../src/auth/user-lookups.js'
import { setUserDisabled } from '../../../src/auth/users.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { newUser } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

describe.each(DIALECTS)('user lookups of verified tokens under concurrency on %s', (dialect) => {
  it('answers 300 concurrent lookups each with its own user, unknown and malformed ids with none', async () => {
    const { db } = await resources.database(dialect)
    const users = await Promise.all(Array.from({ length: 10 }, (_, i) => newUser(db, { externalAuthId: `idp|${i}` })))
    const cases: Array<{ find: () => Promise<{ id: string } | undefined>; expected: string | undefined }> = [
      ...users.map((u) => ({ find: () => lookUpUserById(db, u.id), expected: u.id })),
      ...users.map((u, i) => ({ find: () => lookUpUserByExternalAuthId(db, `idp|${i}`), expected: u.id })),
      { find: () => lookUpUserById(db, crypto.randomUUID()), expected: undefined },
      { find: () => lookUpUserById(db, 'not-a-uuid'), expected: undefined },
      { find: () => lookUpUserByExternalAuthId(db, 'idp|unknown'), expected: undefined },
    ]
    const calls = Array.from({ length: 300 }, (_, i) => cases[i % cases.length] as (typeof cases)[number])
    const found = await Promise.all(calls.map((c) => c.find()))
    expect(found.map((u) => u?.id)).toEqual(calls.map((c) => c.expected))
  })

  it('a lookup that arrives while another has already read the user, and after the user was disabled, sees the user disabled: it is never answered by that lookup', async () => {
    const { db } = await resources.database(dialect)
    const user = await newUser(db)
    // The lookup's query runs at once, but its rows are handed back only when released.
    let read!: () => void
    const wasRead = new Promise<void>((resolve) => (read = resolve))
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    const held = new Proxy(db, {
      apply(target, thisArg, args: [string]) {
        const query = Reflect.apply(target, thisArg, args) as Knex.QueryBuilder
        const run = query.then.bind(query)
        return Object.assign(query, {
          then: (resolve: (rows: unknown) => unknown, reject: (err: unknown) => unknown) =>
            run(async (rows: unknown) => {
              read()
              await released
              return rows
            }).then(resolve, reject),
        })
      },
    })
    const first = lookUpUserById(held, user.id)
    await wasRead
    await setUserDisabled(db, user.id, true, new Date())
    const second = lookUpUserById(held, user.id)
    release()
    expect((await first)?.disabled_at).toBeNull()
    expect((await second)?.disabled_at).toBeInstanceOf(Date)
  })
})
