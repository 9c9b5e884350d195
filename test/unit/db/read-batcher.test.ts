/**
 * Shared polling (src/db/read-batcher.ts): point reads asked in one turn of the event loop go out
 * as one load, at most 500 keys each; each waiter gets its own row; a failed load fails its
 * waiters only; reads of another turn are another load.
 */
import { describe, expect, it } from 'vitest'
import type { Queryable } from '../../../src/db/knex.js'
import { readBatcher, sleepToGrid } from '../../../src/db/read-batcher.js'

function recordingLoader(rows: Record<string, string>, failOn?: string) {
  const loads: string[][] = []
  const load = async (_db: Queryable, keys: string[]) => {
    loads.push([...keys])
    if (failOn && keys.includes(failOn)) throw new Error(`load failed for ${failOn}`)
    return new Map(keys.filter((k) => k in rows).map((k) => [k, rows[k] as string]))
  }
  return { load, loads }
}

const handle = () => (() => undefined) as unknown as Queryable

describe('read batcher', () => {
  it('merges the reads of one turn into one load, a key asked twice once, and answers each waiter with its own row', async () => {
    const { load, loads } = recordingLoader({ a: 'A', b: 'B' })
    const batcher = readBatcher(handle(), load)
    const answers = await Promise.all([batcher.get('a'), batcher.get('b'), batcher.get('a'), batcher.get('missing')])
    expect(answers).toEqual(['A', 'B', 'A', undefined])
    expect(loads).toEqual([['a', 'b', 'missing']])

    // Another turn: another load, with a fresh read.
    expect(await batcher.get('b')).toBe('B')
    expect(loads).toHaveLength(2)
  })

  it('loads at most 500 keys at a time', async () => {
    const rows = Object.fromEntries(Array.from({ length: 1_201 }, (_, i) => [`k${i}`, `v${i}`]))
    const { load, loads } = recordingLoader(rows)
    const batcher = readBatcher(handle(), load)
    const answers = await Promise.all(Object.keys(rows).map((k) => batcher.get(k)))
    expect(answers).toEqual(Object.values(rows))
    expect(loads.map((l) => l.length)).toEqual([500, 500, 201])
  })

  it('fails the waiters of a failed load, and only them', async () => {
    const rows = Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`k${i}`, `v${i}`]))
    const { load } = recordingLoader(rows, 'k550')
    const batcher = readBatcher(handle(), load)
    const answers = await Promise.allSettled(Object.keys(rows).map((k) => batcher.get(k)))
    expect(answers.slice(0, 500).every((a) => a.status === 'fulfilled')).toBe(true)
    expect(answers.slice(500).map((a) => (a.status === 'rejected' ? String(a.reason) : 'fulfilled'))).toEqual(Array(100).fill('Error: load failed for k550'))
  })

  it('keeps handles and kinds of read apart', async () => {
    const first = recordingLoader({ a: 'first' })
    const second = recordingLoader({ a: 'second' })
    const db = handle()
    const [x, y, z] = await Promise.all([readBatcher(db, first.load).get('a'), readBatcher(db, second.load).get('a'), readBatcher(handle(), first.load).get('a')])
    expect([x, y, z]).toEqual(['first', 'second', 'first'])
    expect(first.loads).toEqual([['a'], ['a']])
    expect(second.loads).toEqual([['a']])
  })

  it('wakes pollers that started apart in the same turn, so their reads share a load', async () => {
    const { load, loads } = recordingLoader({ a: 'A', b: 'B' })
    const db = handle()
    // Just past a grid point of 1 s: both pollers below start well before the next one.
    await sleepToGrid(1_000)
    const poll = async (key: string, delayMs: number) => {
      await new Promise((resolve) => setTimeout(resolve, delayMs))
      await sleepToGrid(1_000)
      return readBatcher(db, load).get(key)
    }
    expect(await Promise.all([poll('a', 0), poll('b', 100)])).toEqual(['A', 'B'])
    expect(loads).toEqual([['a', 'b']])
  })

  it('stops sleeping when aborted', async () => {
    const controller = new AbortController()
    const sleeping = sleepToGrid(3_600_000, controller.signal)
    controller.abort()
    await expect(sleeping).resolves.toBeUndefined()
  })
})
