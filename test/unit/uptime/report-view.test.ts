import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { dailyBars, nodesBelow, renderUptimeReport, type NodeUptimeRow } from '../../../src/cli/uptime-report.js'
import { showUptimeReport } from '../../../src/cli/uptime-view.js'

function figures(up: number, down: number, planned = 0) {
  const counted = up + down
  return { window_start: '2026-05-01T00:00:00.000Z', uptime_seconds: up, downtime_seconds: down, planned_downtime_seconds: planned, unplanned_downtime_seconds: down - planned, unknown_seconds: 0, total_seconds: counted, uptime_percentage: counted === 0 ? null : Math.floor((up * 100_000) / counted) / 1_000 }
}

function node(id: string, days: Array<[string, number, number]>, planned = 0): NodeUptimeRow {
  const up = days.reduce((s, d) => s + d[1], 0)
  const down = days.reduce((s, d) => s + d[2], 0)
  return {
    node_id: id,
    chain_profile_id: 'devnet',
    node_type: 'full',
    state: 'healthy',
    windows: { '24h': figures(up, down, planned), '7d': figures(up, down, planned), '30d': figures(up, down, planned) },
    daily: days.map(([day, u, d]) => ({ period_start: `${day}T00:00:00.000Z`, period_end: `${day}T23:59:59.000Z`, ...figures(u, d) })),
  }
}

/** A terminal-like stream that keeps what ink writes. */
class Screen extends Writable {
  text = ''
  columns = 120
  rows = 50
  isTTY = true
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.text += chunk.toString('utf8')
    done()
  }
}

const ANSI = new RegExp(String.raw`\u001b\[[0-9;?]*[A-Za-z]`, 'g')

describe('uptime report rendering', () => {
  const a = node('node-a', [['2026-05-01', 86_400, 0], ['2026-05-02', 43_200, 43_200]])
  const b = node('node-b', [['2026-05-01', 0, 0], ['2026-05-02', 86_400, 0]])

  it('adds the fleet up per day, and leaves a day with nothing counted without a bar', () => {
    expect(dailyBars([a, b], 40)).toEqual([
      { day: '2026-05-01', days: 1, percentage: 100, filled: 40, width: 40 },
      { day: '2026-05-02', days: 1, percentage: 75, filled: 30, width: 40 },
    ])
    expect(dailyBars([b], 10)[0]).toEqual({ day: '2026-05-01', days: 1, percentage: null, filled: 0, width: 10 })
  })

  it('collapses consecutive days without data into one line, in plain text and in the ink view', async () => {
    const late = node('node-late', [['2026-05-01', 0, 0], ['2026-05-02', 0, 0], ['2026-05-03', 0, 0], ['2026-05-04', 86_400, 0], ['2026-05-05', 0, 0], ['2026-05-06', 43_200, 43_200]])
    expect(dailyBars([late], 10)).toEqual([
      { day: '2026-05-01', until: '2026-05-03', days: 3, percentage: null, filled: 0, width: 10 },
      { day: '2026-05-04', days: 1, percentage: 100, filled: 10, width: 10 },
      // A single empty day stays a day of its own.
      { day: '2026-05-05', days: 1, percentage: null, filled: 0, width: 10 },
      { day: '2026-05-06', days: 1, percentage: 50, filled: 5, width: 10 },
    ])
    const text = renderUptimeReport({ generated_at: '2026-05-06T12:00:00.000Z', nodes: [late] })
    expect(text).toContain('\n2026-05-01 to 2026-05-03  no data (3 days)\n2026-05-04  ████')
    expect(text.split('\n').filter((l) => l.includes('no data'))).toHaveLength(2)

    const screen = new Screen()
    await showUptimeReport({ generated_at: '2026-05-06T12:00:00.000Z', nodes: [late] }, screen as unknown as NodeJS.WriteStream)
    const shown = screen.text.replace(ANSI, '')
    expect(shown).toContain('2026-05-01 to 2026-05-03  no data (3 days)')
    expect(shown).not.toContain('2026-05-02')
  })

  it('finds the nodes below a minimum, never one without data', () => {
    expect(nodesBelow([a, b, node('node-c', [])], 99.9, '30d')).toEqual(['node-a'])
  })

  it('shows the 30 days’ downtime split into planned (rollouts) and unplanned beside the SLA figures', () => {
    const upgraded = node('node-up', [['2026-05-01', 84_600, 1_800]], 1_200)
    const text = renderUptimeReport({ generated_at: '2026-05-02T12:00:00.000Z', nodes: [upgraded] })
    expect(text.split('\n')[0]).toMatch(/^NODE\s+CHAIN\s+STATE\s+24H\s+7D\s+30D\s+PLANNED 30D\s+UNPLANNED 30D$/)
    expect(text).toMatch(/^node-up\s+devnet\s+healthy\s+97\.916%\s+97\.916%\s+97\.916%\s+20m\s+10m$/m)
  })

  it('draws the table and one bar per day, in plain text and in the ink view', async () => {
    const text = renderUptimeReport({ generated_at: '2026-05-02T12:00:00.000Z', nodes: [a], check: { min: 99.9, window: '30d', below: ['node-a'] } })
    expect(text).toContain('2026-05-02  ████████████████████░░░░░░░░░░░░░░░░░░░░  50.000%')
    expect(text).toContain('1 node(s) below 99.9% over 30d: node-a')

    const screen = new Screen()
    await showUptimeReport({ generated_at: '2026-05-02T12:00:00.000Z', nodes: [a] }, screen as unknown as NodeJS.WriteStream)
    const shown = screen.text.replace(ANSI, '')
    expect(shown).toMatch(/NODE\s+CHAIN\s+STATE\s+24H\s+7D\s+30D/)
    expect(shown).toContain('Uptime per UTC day, last 30 days (node node-a)')
    expect(shown).toContain('2026-05-01  ████████████████████████████████████████  100.000%')
    expect(shown).toContain('2026-05-02  ████████████████████░░░░░░░░░░░░░░░░░░░░  50.000%')
  })
})
