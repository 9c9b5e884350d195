/**
 * The user behind a verified JWT, read on every request (a deleted or disabled user is refused
 * on the next one), with the lookups of one database handle batched as API keys are
 * (api-keys.ts, KeyLookups): one query at a time, and the lookups that arrive while it runs go
 * together into the next (`id IN (...)`). A lookup is only answered by a query that started after
 * it arrived, so no answer is ever reused; under load one query serves many requests, whose
 * per-statement cost (query building, on SQLite its implicit read transaction) was most of a
 * JWT request's CPU beyond a probe's (issue 21).
 */
import { isPostgres } from '../db/dialect.js'
import { isUuid } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { userFromRow, type User, type UserRow } from './users.js'

type Column = 'id' | 'external_auth_id'

interface Waiter {
  key: string
  resolve: (user: User | undefined) => void
  reject: (err: unknown) => void
}

const MAX_KEYS_PER_QUERY = 500

class UserLookups {
  private waiting: Waiter[] = []
  private running = false

  constructor(
    private readonly db: Queryable,
    private readonly column: Column,
  ) {}

  find(key: string): Promise<User | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ key, resolve, reject })
      if (!this.running) {
        this.running = true
        // After the other requests read in this turn of the event loop, so they share the query.
        setImmediate(() => void this.drain())
      }
    })
  }

  private async drain(): Promise<void> {
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting
        this.waiting = []
        try {
          await this.answer(batch)
        } catch (err) {
          for (const waiter of batch) waiter.reject(err)
        }
      }
    } finally {
      this.running = false
    }
  }

  private async answer(batch: Waiter[]): Promise<void> {
    // A uuid column on Postgres matches an id in any letter case (as `where({ id })` did);
    // SQLite compares the text exactly.
    const fold = this.column === 'id' && isPostgres(this.db) ? (s: string) => s.toLowerCase() : (s: string) => s
    const keys = [...new Set(batch.map((w) => w.key))]
    const users = new Map<string, User>()
    for (let i = 0; i < keys.length; i += MAX_KEYS_PER_QUERY) {
      const rows = (await this.db('users').whereIn(this.column, keys.slice(i, i + MAX_KEYS_PER_QUERY))) as UserRow[]
      for (const row of rows) users.set(fold(String(row[this.column])), userFromRow(row))
    }
    for (const waiter of batch) waiter.resolve(users.get(fold(waiter.key)))
  }
}

const byHandle = new WeakMap<Queryable, Map<Column, UserLookups>>()

function lookups(db: Queryable, column: Column): UserLookups {
  let columns = byHandle.get(db)
  if (!columns) byHandle.set(db, (columns = new Map()))
  let found = columns.get(column)
  if (!found) columns.set(column, (found = new UserLookups(db, column)))
  return found
}

/** As findUserById, batched with the concurrent lookups of the same handle. */
export function lookUpUserById(db: Queryable, id: string): Promise<User | undefined> {
  if (!isUuid(id)) return Promise.resolve(undefined)
  return lookups(db, 'id').find(id)
}

/** As findUserByExternalAuthId, batched with the concurrent lookups of the same handle. */
export function lookUpUserByExternalAuthId(db: Queryable, externalAuthId: string): Promise<User | undefined> {
  return lookups(db, 'external_auth_id').find(externalAuthId)
}
