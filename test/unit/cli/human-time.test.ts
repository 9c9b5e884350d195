import { describe, expect, it } from 'vitest'
import { age, ahead, moment, remaining, span, stamp, took } from '../../../src/cli/human-time.js'

const NOW = new Date('2026-11-27T12:00:00.000Z')
const before = (ms: number) => new Date(NOW.getTime() - ms).toISOString()

describe('time as operators read it', () => {
  it('says lengths of time in one unit, or two where seconds matter', () => {
    expect(span(350)).toBe('350ms')
    expect(span(45_000)).toBe('45s')
    expect(span(130_000)).toBe('2m10s')
    expect(span(130_000, false)).toBe('2m')
    expect(span(7_205_000)).toBe('2h')
    expect(span(3 * 86_400_000 + 4 * 3_600_000)).toBe('3d4h')
    expect(span(3 * 86_400_000 + 4 * 3_600_000, false)).toBe('3d')
    expect(span(400, false)).toBe('0s')
  })

  it('gives ages and what is ahead, a date once very old, and the fallback for none', () => {
    expect(age(before(45_000), { now: NOW })).toBe('45s ago')
    expect(age(before(130_000), { now: NOW })).toBe('2m ago')
    expect(age(before(130_000), { now: NOW, precise: true })).toBe('2m10s ago')
    expect(age(before(3 * 86_400_000), { now: NOW })).toBe('3d ago')
    expect(age(before(-240_000), { now: NOW })).toBe('in 4m')
    expect(age(before(200), { now: NOW })).toBe('just now')
    expect(age(before(200 * 86_400_000), { now: NOW })).toBe('2026-05-11')
    expect(age(null, { fallback: 'never' })).toBe('never')
    expect(age(undefined)).toBe('-')
    expect(age('not a time')).toBe('not a time')
  })

  it('keeps the exact time beside the age in one-object views', () => {
    expect(stamp('2026-11-27T11:59:15.500Z')).toBe('2026-11-27 11:59:15Z')
    expect(moment(before(45_000), { now: NOW })).toBe('45s ago (2026-11-27 11:59:15Z)')
    expect(moment(null, { fallback: 'never' })).toBe('never')
  })

  it('says how long a step took, or has taken so far, and how long is left', () => {
    expect(took('2026-11-27T11:00:00Z', '2026-11-27T11:02:10Z')).toBe('2m10s')
    expect(took(before(5_000), null, NOW)).toBe('5s so far')
    expect(took(null, null, NOW)).toBe('-')
    expect(remaining(before(-90_000), NOW)).toBe('1m30s left')
    expect(remaining(before(1), NOW)).toBe('due')
    expect(ahead('2026-11-27T12:04:05Z', NOW)).toBe('2026-11-27 12:04:05Z (4m5s left)')
    expect(ahead(null, NOW)).toBe('-')
  })
})
