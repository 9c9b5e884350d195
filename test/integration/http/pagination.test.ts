import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { toDate } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { paginateKeyset, paginationQuery, pageSchema, type Page } from '../../../src/http/pagination.js'
import { defineRoute } from '../../../src/http/route.js'
import { z } from '../../../src/http/zod.js'
import { DIALECTS, type Dialect } from '../../helpers/db.js'
import { getJson, Resources } from './harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

interface ScratchRow {
  id: string
  created_at: Date
  owner: string
}

const BASE = Date.parse('2024-05-01T10:00:00.000Z')

/**
 * A scratch table with the awkward cases: many rows sharing one timestamp (the id must break
 * ties), and on Postgres timestamps a microsecond apart inside the same millisecond, which a
 * cursor rounded to JavaScript's milliseconds would repeat or skip.
 */
async function scratchTable(db: Db, dialect: Dialect, count: number): Promise<ScratchRow[]> {
  await db.schema.createTable('scratch_items', (t) => {
    t.string('id', 36).primary()
    t.timestamp('created_at', { useTz: true }).notNullable()
    t.string('owner', 20).notNullable()
    t.index(['created_at', 'id'])
  })
  const rows: ScratchRow[] = []
  for (let i = 0; i < count; i++) {
    // Groups of four rows share a timestamp; every third group is out of insertion order.
    const group = Math.floor(i / 4)
    const at = new Date(BASE + (group % 3 === 0 ? 10_000 - group : group) * 1000)
    rows.push({ id: crypto.randomUUID(), created_at: at, owner: i % 5 === 0 ? 'bob' : 'alice' })
  }
  await db('scratch_items').insert(rows)
  if (dialect === 'postgres') {
    for (const micro of ['123456', '123457', '123999']) {
      const id = crypto.randomUUID()
      await db.raw(`insert into scratch_items (id, created_at, owner) values (?, ?::timestamptz, 'alice')`, [id, `2024-05-01 09:00:00.${micro}+00`])
      rows.push({ id, created_at: new Date('2024-05-01T09:00:00.123Z'), owner: 'alice' })
    }
  }
  return rows
}

/** Expected order, from the database itself (its collation decides how ids compare). */
async function expectedIds(db: Db, direction: 'asc' | 'desc', owner?: string): Promise<string[]> {
  const q = db('scratch_items').select('id').orderBy([
    { column: 'created_at', order: direction },
    { column: 'id', order: direction },
  ])
  if (owner) q.where({ owner })
  return ((await q) as { id: string }[]).map((r) => r.id)
}

async function walk(fetchPage: (cursor: string | undefined) => Promise<Page<{ id: string }>>): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = []
  let cursor: string | undefined
  let pages = 0
  for (;;) {
    const page = await fetchPage(cursor)
    pages++
    ids.push(...page.items.map((i) => i.id))
    if (page.next_cursor === null) return { ids, pages }
    cursor = page.next_cursor
    if (pages > 100) throw new Error('pagination does not end')
  }
}

describe.each(DIALECTS)('keyset pagination on %s', (dialect) => {
  it.each(['asc', 'desc'] as const)('walks every row exactly once in (created_at, id) %s order', async (direction) => {
    const t = await resources.database(dialect)
    await scratchTable(t.db, dialect, 23)
    const expected = await expectedIds(t.db, direction)
    expect(expected.length).toBe(dialect === 'postgres' ? 26 : 23)

    const { ids, pages } = await walk((cursor) =>
      paginateKeyset<{ id: string }>(t.db, t.db('scratch_items'), { sortColumn: 'created_at', direction, limit: 5, cursor, map: (r) => ({ id: r.id as string }) }),
    )
    expect(ids).toEqual(expected)
    expect(pages).toBe(Math.ceil(expected.length / 5))
  })

  it('keeps the caller filters and columns, and drops its own cursor columns from the rows', async () => {
    const t = await resources.database(dialect)
    await scratchTable(t.db, dialect, 23)
    const expected = await expectedIds(t.db, 'asc', 'bob')
    const first = await paginateKeyset(t.db, t.db('scratch_items').where({ owner: 'bob' }), { sortColumn: 'created_at', limit: 2, columns: ['id', 'owner'] })
    expect(Object.keys(first.items[0] ?? {}).sort()).toEqual(['id', 'owner'])
    const { ids } = await walk((cursor) =>
      paginateKeyset<{ id: string }>(t.db, t.db('scratch_items').where({ owner: 'bob' }), { sortColumn: 'created_at', limit: 2, cursor, columns: ['id'] }),
    )
    expect(ids).toEqual(expected)
  })

  it('gives next_cursor null when the rows fit in one page exactly', async () => {
    const t = await resources.database(dialect)
    await scratchTable(t.db, 'sqlite', 5)
    const page = await paginateKeyset(t.db, t.db('scratch_items'), { sortColumn: 'created_at', limit: 5 })
    expect(page.items).toHaveLength(5)
    expect(page.next_cursor).toBeNull()
    const empty = await paginateKeyset(t.db, t.db('scratch_items').where({ owner: 'nobody' }), { sortColumn: 'created_at', limit: 5 })
    expect(empty).toEqual({ items: [], next_cursor: null })
  })

  it('pages over HTTP: limit defaults to 50, at most 200, and a bad cursor is a 400', async () => {
    const t = await resources.database(dialect)
    const rows = await scratchTable(t.db, dialect, 57)
    const item = z.object({ id: z.string(), created_at: z.string().datetime(), owner: z.string() })
    const listRoute = defineRoute({
      method: 'get',
      path: '/api/v1/scratch-items',
      summary: 'List scratch items',
      auth: 'none',
      request: { query: paginationQuery },
      responses: { 200: pageSchema(item) },
    }).handle(async ({ query }) => {
      const page = await paginateKeyset(t.db, t.db('scratch_items'), {
        sortColumn: 'created_at',
        limit: query.limit,
        cursor: query.cursor,
        map: (r) => ({ id: r.id as string, created_at: toDate(r.created_at).toISOString(), owner: r.owner as string }),
      })
      return { status: 200, body: page }
    })
    const api = await resources.api({ db: t.db, routes: [listRoute] })
    const url = `${api.url}/api/v1/scratch-items`

    const first = await getJson(url)
    expect(first.status).toBe(200)
    const firstPage = first.body as Page<z.infer<typeof item>>
    expect(firstPage.items).toHaveLength(50)
    expect(firstPage.next_cursor).toEqual(expect.any(String))
    expect(Object.keys(firstPage.items[0] ?? {}).sort()).toEqual(['created_at', 'id', 'owner'])

    const { ids } = await walk(async (cursor) => {
      const res = await getJson(`${url}?limit=7${cursor ? `&cursor=${cursor}` : ''}`)
      expect(res.status).toBe(200)
      return res.body as Page<{ id: string }>
    })
    expect(ids).toEqual(await expectedIds(t.db, 'asc'))
    expect(new Set(ids).size).toBe(rows.length)

    const max = await getJson(`${url}?limit=200`)
    expect((max.body as Page<unknown>).items).toHaveLength(rows.length)
    for (const [query, details] of [
      ['limit=201', 'query.limit: Number must be less than or equal to 200'],
      ['limit=0', 'query.limit: Number must be greater than or equal to 1'],
      ['limit=ten', 'query.limit: Expected number, received nan'],
      ['cursor=not!base64', 'query.cursor: must be a next_cursor value returned by this API'],
    ]) {
      const res = await getJson(`${url}?${query}`)
      expect(res.status, query).toBe(400)
      expect(res.body, query).toEqual({ error: 'invalid request', details })
    }
    for (const forged of ['abc', Buffer.from('{"a":1}').toString('base64url'), Buffer.from('[1]').toString('base64url'), Buffer.from('[null,"x"]').toString('base64url')]) {
      const res = await getJson(`${url}?cursor=${forged}`)
      expect(res.status, forged).toBe(400)
      expect(res.body, forged).toEqual({ error: 'invalid cursor', details: 'query.cursor: must be a next_cursor value returned by this API' })
    }
  })
})
