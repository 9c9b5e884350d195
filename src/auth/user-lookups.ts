/**
 * The user behind a verified JWT, read on every request (a deleted or disabled user is refused
 * on the next one), with the lookups of one database handle batched per turn of the event loop as
 * API keys are (src/db/turn-batches.ts: `id IN (...)`, each lookup answered only by a query that
 * started after it arrived).
 */
import { isPostgres } from '../db/dialect.js'
import { isUuid } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { TurnBatches, type Waiter } from '../db/turn-batches.js'
import { userFromRow, type User, type UserRow } from './users.js'

type Column = 'id' | 'external_auth_id'

interface UserWaiter extends Waiter<User | undefined> {
  key: string
}

const MAX_KEYS_PER_QUERY = 500

async function answerBatch(db: Queryable, column: Column, batch: UserWaiter[]): Promise<void> {
  // A uuid column on Postgres matches an id in any letter case (as `where({ id })` did);
  // SQLite compares the text exactly.
  const fold = column === 'id' && isPostgres(db) ? (s: string) => s.toLowerCase() : (s: string) => s
  const keys = [...new Set(batch.map((w) => w.key))]
  const users = new Map<string, User>()
  for (let i = 0; i < keys.length; i += MAX_KEYS_PER_QUERY) {
    const rows = (await db('users').whereIn(column, keys.slice(i, i + MAX_KEYS_PER_QUERY))) as UserRow[]
    for (const row of rows) users.set(fold(String(row[column])), userFromRow(row))
  }
  for (const waiter of batch) waiter.resolve(users.get(fold(waiter.key)))
}

const byHandle = new WeakMap<Queryable, Map<Column, TurnBatches<UserWaiter>>>()

function find(db: Queryable, column: Column, key: string): Promise<User | undefined> {
  let columns = byHandle.get(db)
  if (!columns) byHandle.set(db, (columns = new Map()))
  let batches = columns.get(column)
  if (!batches) columns.set(column, (batches = new TurnBatches((batch) => answerBatch(db, column, batch))))
  const into = batches
  return new Promise((resolve, reject) => into.add({ key, resolve, reject }))
}

/** As findUserById, batched with the concurrent lookups of the same handle. */
export function lookUpUserById(db: Queryable, id: string): Promise<User | undefined> {
  if (!isUuid(id)) return Promise.resolve(undefined)
  return find(db, 'id', id)
}

/** As findUserByExternalAuthId, batched with the concurrent lookups of the same handle. */
export function lookUpUserByExternalAuthId(db: Queryable, externalAuthId: string): Promise<User | undefined> {
  return find(db, 'external_auth_id', externalAuthId)
}
