import { describe, expect, it } from 'vitest'
import { isUuid, uuidv7 } from '../../../src/db/ids.js'

describe('uuidv7', () => {
  it('is a version 7, variant 10 UUID carrying the milliseconds it was made for', () => {
    const at = Date.UTC(2026, 10, 27, 17, 40, 1, 234)
    const id = uuidv7(at)
    expect(isUuid(id)).toBe(true)
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(at)
    expect(Number.parseInt(uuidv7(0).slice(0, 13).replace('-', ''), 16)).toBe(0)
    expect(Number.parseInt(uuidv7(2 ** 48 - 1).replace(/-/g, '').slice(0, 12), 16)).toBe(2 ** 48 - 1)
  })

  it('sorts by time as text, and never repeats across many draws of random bytes', () => {
    const ids = Array.from({ length: 5_000 }, (_, i) => uuidv7(1_700_000_000_000 + i))
    expect([...ids].sort()).toEqual(ids)
    expect(new Set(ids).size).toBe(ids.length)
    const sameMillisecond = Array.from({ length: 5_000 }, () => uuidv7(1_700_000_000_000))
    expect(new Set(sameMillisecond).size).toBe(sameMillisecond.length)
    // The random part uses every hex digit: not a constant or a counter.
    const tails = new Set(sameMillisecond.map((id) => id.slice(-1)))
    expect(tails.size).toBe(16)
  })
})
