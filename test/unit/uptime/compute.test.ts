import { describe, expect, it } from 'vitest'
import { NODE_STATES } from '../../../src/nodes/states.js'
import { classOfState, STATE_CLASSES } from '../../../src/uptime/classification.js'
import { computeHourlyBuckets, uptimePercentage, type LogInterval } from '../../../src/uptime/compute.js'
import { periodsOf, windowBounds } from '../../../src/uptime/reads.js'

const T = (hhmmss: string, day = '2026-05-01') => new Date(`${day}T${hhmmss}Z`)
const iv = (state: string, from: Date, to: Date | null): LogInterval => ({ state, entered_at: from, exited_at: to })
const secs = (b: { uptime_seconds: number; downtime_seconds: number; unknown_seconds: number; total_seconds: number }) => [b.uptime_seconds, b.downtime_seconds, b.unknown_seconds, b.total_seconds]

describe('state classification', () => {
  it('classifies every node state: up, down, unknown, or outside any bucket once terminal', () => {
    expect(Object.keys(STATE_CLASSES).sort()).toEqual([...NODE_STATES].sort())
    expect(NODE_STATES.filter((s) => classOfState(s) === 'up')).toEqual(['provisioning', 'healthy', 'degraded'])
    expect(NODE_STATES.filter((s) => classOfState(s) === 'down')).toEqual(['down', 'maintenance'])
    expect(NODE_STATES.filter((s) => classOfState(s) === 'unknown')).toEqual(['syncing', 'terminating'])
    expect(NODE_STATES.filter((s) => classOfState(s) === 'none')).toEqual(['terminated', 'failed'])
  })
})

describe('hourly buckets from the state log', () => {
  it('splits intervals at hour and day boundaries and counts provisioning as up for 10 minutes only', () => {
    const log = [
      iv('provisioning', T('23:50:00'), T('00:15:00', '2026-05-02')),
      iv('syncing', T('00:15:00', '2026-05-02'), T('00:20:30', '2026-05-02')),
      iv('healthy', T('00:20:30', '2026-05-02'), null),
    ]
    const buckets = computeHourlyBuckets(log, { nodeId: 'n', fromHourMs: T('00:00:00').getTime(), now: T('01:05:00', '2026-05-02') })
    expect(buckets.map((b) => b.bucket_hour.toISOString())).toEqual(['2026-05-01T23:00:00.000Z', '2026-05-02T00:00:00.000Z', '2026-05-02T01:00:00.000Z'])
    // 23:50-24:00 inside the grace.
    expect(secs(buckets[0]!)).toEqual([600, 0, 0, 600])
    // 00:00-00:15 provisioning past the grace (down), 5m30s syncing (unknown), 39m30s healthy.
    expect(secs(buckets[1]!)).toEqual([2370, 900, 330, 3600])
    expect(secs(buckets[2]!)).toEqual([300, 0, 0, 300])
    expect(buckets.map((b) => b.is_complete)).toEqual([true, true, false])
  })

  it('stops at the hour a node ended and keeps an hour open until the settle time passed', () => {
    const log = [iv('healthy', T('10:00:00'), T('10:30:00')), iv('terminated', T('10:30:00'), null)]
    const late = computeHourlyBuckets(log, { nodeId: 'n', fromHourMs: T('10:00:00').getTime(), now: T('15:00:00') })
    expect(late).toHaveLength(1)
    expect(secs(late[0]!)).toEqual([1800, 0, 0, 1800])
    const justAfter = computeHourlyBuckets(log, { nodeId: 'n', fromHourMs: T('10:00:00').getTime(), now: T('11:00:30'), settleMs: 60_000 })
    expect(justAfter[0]!.is_complete).toBe(false)
  })

  it('gives a provisioning that started again its own grace', () => {
    const log = [iv('provisioning', T('10:00:00'), T('10:30:00')), iv('failed', T('10:30:00'), null)]
    expect(secs(computeHourlyBuckets(log, { nodeId: 'n', fromHourMs: 0, now: T('12:00:00') })[0]!)).toEqual([600, 1200, 0, 1800])
  })
})

describe('percentages and periods', () => {
  it('leaves unknown time out and never rounds a percentage up', () => {
    expect(uptimePercentage({ uptime_seconds: 3600, downtime_seconds: 1500, planned_downtime_seconds: 0, unknown_seconds: 900, total_seconds: 6000 })).toBe(70.588)
    expect(uptimePercentage({ uptime_seconds: 2_591_999, downtime_seconds: 1, planned_downtime_seconds: 0, unknown_seconds: 0, total_seconds: 2_592_000 })).toBe(99.999)
    expect(uptimePercentage({ uptime_seconds: 0, downtime_seconds: 0, planned_downtime_seconds: 0, unknown_seconds: 60, total_seconds: 60 })).toBeNull()
  })

  it('makes a 24h window the current hour and the 23 before it, and daily periods UTC days cut to the window', () => {
    const now = T('00:30:00', '2026-05-02')
    expect(new Date(windowBounds('24h', now).startMs).toISOString()).toBe('2026-05-01T01:00:00.000Z')
    const periods = periodsOf(new Map(), '24h', 'daily', now)
    expect(periods.map((p) => [p.period_start, p.period_end])).toEqual([
      ['2026-05-01T01:00:00.000Z', '2026-05-02T00:00:00.000Z'],
      ['2026-05-02T00:00:00.000Z', '2026-05-02T00:30:00.000Z'],
    ])
    expect(periodsOf(new Map(), '30d', 'hourly', now)).toHaveLength(720)
  })
})
