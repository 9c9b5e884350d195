import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { decodeCursor, encodeCursor, paginationQuery } from '../../../src/http/pagination.js'

describe('cursor', () => {
  it.each([
    { sort: '2024-05-01 10:00:00.123456+00', id: '6f1c1a5e-2f0b-4f4e-9a59-8f0e1c0b9d11' },
    { sort: 1714557600123, id: 'n-1' },
    { sort: 'a/b+c=?&', id: 42 },
  ])('round-trips %o through URL-safe text', (position) => {
    const cursor = encodeCursor(position)
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(decodeCursor(cursor)).toEqual(position)
  })

  it.each(['', '***', 'abc', Buffer.from('{}').toString('base64url'), Buffer.from('[1,2,3]').toString('base64url'), Buffer.from('[1e999,"x"]').toString('base64url'), Buffer.from('[true,"x"]').toString('base64url')])(
    'rejects %j as a 400 naming query.cursor',
    (cursor) => {
      expect(() => decodeCursor(cursor)).toThrow(ValidationError)
      expect(() => decodeCursor(cursor)).toThrow(expect.objectContaining({ details: 'query.cursor: must be a next_cursor value returned by this API' }))
    },
  )
})

describe('paginationQuery', () => {
  it('defaults limit to 50 and coerces it from the query string', () => {
    expect(paginationQuery.parse({})).toEqual({ limit: 50 })
    expect(paginationQuery.parse({ limit: '200', cursor: 'abc_-' })).toEqual({ limit: 200, cursor: 'abc_-' })
  })

  it.each([{ limit: '201' }, { limit: '0' }, { limit: '1.5' }, { limit: ['1', '2'] }, { cursor: 'a b' }, { cursor: 'x'.repeat(1025) }])('rejects %o', (query) => {
    expect(paginationQuery.safeParse(query).success).toBe(false)
  })
})
