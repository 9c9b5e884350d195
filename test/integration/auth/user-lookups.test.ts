import crypto from 'node:crypto'
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

  it('a user disabled while lookups are running is seen disabled by every lookup that starts after', async () => {
    const { db } = await resources.database(dialect)
    const user = await newUser(db)
    let stop = false
    const before: unknown[] = []
    const churn = (async () => {
      while (!stop) before.push(await lookUpUserById(db, user.id))
    })()
    await setUserDisabled(db, user.id, true, new Date())
    const after = await Promise.all(Array.from({ length: 20 }, () => lookUpUserById(db, user.id)))
    stop = true
    await churn
    expect(before.length).toBeGreaterThan(0)
    expect(after.map((u) => u?.disabled_at instanceof Date)).toEqual(new Array(20).fill(true))
  })
})
