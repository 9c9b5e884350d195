/**
 * Cursor pagination for every list: `?limit=&cursor=` -> `{ items, next_cursor }`.
 *
 * Keyset, not offset: a page starts strictly after the last row of the previous one in a total
 * order (sort column, then id as tie-breaker), so rows inserted or deleted meanwhile never make
 * a client see a row twice or skip one that existed throughout. One more row than asked is
 * fetched to know whether a next page exists without a count query.
 *
 * The cursor is opaque to clients (base64url of the last row's position); only a cursor this
 * API returned is accepted, anything else is a 400.
 */
import type { Knex } from 'knex'
import type { ZodTypeAny } from 'zod'
import { ValidationError } from '../errors.js'
import { isPostgres } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { z } from './zod.js'

export const DEFAULT_PAGE_SIZE = 50
export const MAX_PAGE_SIZE = 200
const MAX_CURSOR_LENGTH = 1024

export const paginationQuery = z.object({
  limit: z.coerce
    .number()
    .int()
    .min(1)
    .max(MAX_PAGE_SIZE)
    .default(DEFAULT_PAGE_SIZE)
    .openapi({ description: `Page size, 1 to ${MAX_PAGE_SIZE}`, example: DEFAULT_PAGE_SIZE }),
  cursor: z
    .string()
    .min(1)
    .max(MAX_CURSOR_LENGTH)
    .regex(/^[A-Za-z0-9_-]+$/, 'must be a next_cursor value returned by this API')
    .optional()
    .openapi({ description: 'The `next_cursor` of the previous page; omit for the first page' }),
})

export type PaginationQuery = z.infer<typeof paginationQuery>

/** Response schema of a list: `{ items: [...], next_cursor: string | null }`. */
export function pageSchema<T extends ZodTypeAny>(item: T) {
  return z.object({
    items: z.array(item),
    next_cursor: z.string().nullable().openapi({ description: 'Pass as `cursor` for the next page; null on the last page' }),
  })
}

export interface Page<T> {
  items: T[]
  next_cursor: string | null
}

/** Where a page ends: the sort value and the id of its last row. */
export interface KeysetPosition {
  sort: string | number
  id: string | number
}

export function encodeCursor(position: KeysetPosition): string {
  return Buffer.from(JSON.stringify([position.sort, position.id]), 'utf8').toString('base64url')
}

export function decodeCursor(cursor: string): KeysetPosition {
  const invalid = () => new ValidationError('invalid cursor', 'query.cursor: must be a next_cursor value returned by this API')
  if (!/^[A-Za-z0-9_-]+$/.test(cursor) || cursor.length > MAX_CURSOR_LENGTH) throw invalid()
  let decoded: unknown
  try {
    decoded = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
  } catch {
    throw invalid()
  }
  if (!Array.isArray(decoded) || decoded.length !== 2) throw invalid()
  const [sort, id] = decoded as unknown[]
  if (!isKeyPart(sort) || !isKeyPart(id)) throw invalid()
  return { sort, id }
}

function isKeyPart(value: unknown): value is string | number {
  return typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value))
}

export interface KeysetOptions<T> {
  /** Sort column, e.g. `created_at` or `n.created_at` in a join. */
  sortColumn: string
  /** Unique tie-breaker, `id` unless given. */
  idColumn?: string
  direction?: 'asc' | 'desc'
  limit: number
  cursor?: string | undefined
  /** Columns to select; `*` unless given. The query passed in must not select on its own. */
  columns?: readonly string[]
  map?: (row: Record<string, unknown>) => T
}

const SORT_ALIAS = '__cursor_sort'
const ID_ALIAS = '__cursor_id'

/**
 * Runs `query` (filters only: no select, order or limit) one page at a time. Wants an index on
 * (sortColumn, idColumn) for the filtered rows.
 *
 * The cursor keeps the sort value exactly as the database has it. On Postgres that means the
 * column's text form: a timestamptz holds microseconds, and a JavaScript Date rounded to
 * milliseconds would make the next page repeat rows written by `now()`. Bound back as text,
 * Postgres casts it to the column's type. SQLite stores our timestamps as epoch milliseconds,
 * which round-trip as numbers.
 */
export async function paginateKeyset<T = Record<string, unknown>>(db: Queryable, query: Knex.QueryBuilder, options: KeysetOptions<T>): Promise<Page<T>> {
  const { sortColumn, idColumn = 'id', direction = 'asc', limit } = options
  const position = options.cursor === undefined ? undefined : decodeCursor(options.cursor)
  const exactText = isPostgres(db)

  // A sort or id column the caller selects anyway is read from the row under its own name
  // rather than selected twice (on SQLite the sort value is the same; Postgres wants its text).
  const sortKey = exactText ? undefined : selectedAs(options.columns, sortColumn)
  const idKey = selectedAs(options.columns, idColumn)
  query.select(...(options.columns ?? ['*']))
  if (sortKey === undefined) query.select(db.raw(exactText ? '??::text as ??' : '?? as ??', [sortColumn, SORT_ALIAS]))
  if (idKey === undefined) query.select(db.raw('?? as ??', [idColumn, ID_ALIAS]))
  if (position) {
    // Row-value comparison: (sort, id) strictly after the cursor in the page order.
    query.whereRaw(`(??, ??) ${direction === 'asc' ? '>' : '<'} (?, ?)`, [sortColumn, idColumn, position.sort, position.id])
  }
  query
    .orderBy([
      { column: sortColumn, order: direction },
      { column: idColumn, order: direction },
    ])
    .limit(limit + 1)

  const rows = (await query) as Record<string, unknown>[]
  const pageRows = rows.slice(0, limit)
  const last = pageRows[pageRows.length - 1]
  const next_cursor =
    rows.length > limit && last ? encodeCursor({ sort: keyPart(last[sortKey ?? SORT_ALIAS]), id: keyPart(last[idKey ?? ID_ALIAS]) }) : null
  const aliased = sortKey === undefined || idKey === undefined
  const items = pageRows.map((row) => {
    if (!aliased) return options.map ? options.map(row) : (row as T)
    const { [SORT_ALIAS]: _sort, [ID_ALIAS]: _id, ...rest } = row
    return options.map ? options.map(rest) : (rest as T)
  })
  return { items, next_cursor }
}

/**
 * The row key under which `column` comes back when `columns` selects it plainly (`n.id` comes
 * back as `id`), provided no other selected column comes back under the same key.
 */
function selectedAs(columns: readonly string[] | undefined, column: string): string | undefined {
  if (!columns?.includes(column)) return undefined
  const key = rowKey(column)
  return columns.filter((c) => rowKey(c) === key).length === 1 ? key : undefined
}

function rowKey(column: string): string {
  return column.slice(column.lastIndexOf('.') + 1)
}

function keyPart(value: unknown): string | number {
  if (typeof value === 'string' || typeof value === 'number') return value
  if (typeof value === 'bigint') return value.toString()
  if (value instanceof Date) return value.getTime()
  throw new Error(`keyset pagination: sort and id columns must not be null (got ${String(value)})`)
}
