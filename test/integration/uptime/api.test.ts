/**
 * The uptime endpoints through the api-server app: auth, scope, ownership, bad input, and the
 * figures a user reads against hand-computed ones (same story as rollup.test.ts).
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { applyHealthUpdate, type StateWriter } from '../../../src/nodes/health-state-machine.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import type { NodeState } from '../../../src/nodes/states.js'
import { runUptimeRollup } from '../../../src/uptime/rollup.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, TestClock, type AuthApi } from '../auth/api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const at = (iso: string) => new Date(iso)
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000'

async function move(db: Db, nodeId: string, state: NodeState, now: Date, writer: StateWriter = 'heartbeat_evaluation', reason?: string): Promise<void> {
  await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer, state }, now, ...(reason ? { reason } : {}) }))
}

async function nodeOf(db: Db, userId: string, created: Date): Promise<string> {
  const subscriptionId = await insertSubscription(db, userId, created)
  return (await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, created)).id
}

/** 22:50 created, 23:05 syncing, 23:20 healthy, 23:50 down, 00:10 healthy (see rollup.test.ts). */
async function story(db: Db, userId: string): Promise<string> {
  const id = await nodeOf(db, userId, at('2026-05-01T22:50:00Z'))
  await move(db, id, 'syncing', at('2026-05-01T23:05:00Z'), 'provisioning')
  await move(db, id, 'healthy', at('2026-05-01T23:20:00Z'))
  await move(db, id, 'down', at('2026-05-01T23:50:00Z'))
  await move(db, id, 'healthy', at('2026-05-02T00:10:00Z'))
  return id
}

async function setup(db: Db, api: AuthApi) {
  const alice = await newUser(db)
  const bob = await newUser(db)
  const root = await newUser(db, { admin: true })
  const now = api.clock.now()
  return {
    alice,
    bob,
    aliceKey: (await newKey(db, alice.id, { scopes: ['nodes:read'], now })).key,
    aliceNoScope: (await newKey(db, alice.id, { scopes: ['subscriptions:read'], now })).key,
    bobKey: (await newKey(db, bob.id, { scopes: ['*'], now })).key,
    adminKey: (await newKey(db, root.id, { scopes: ['*', 'admin'], admin: true, now })).key,
    rootUserKey: (await newKey(db, root.id, { scopes: ['nodes:read'], now })).key,
  }
}

describe.each(DIALECTS)('uptime API on %s', (dialect) => {
  it('needs authentication and nodes:read on every uptime endpoint', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db, { clock: new TestClock(at('2026-05-02T00:30:00Z').getTime()) })
    const s = await setup(db, api)
    const node = await story(db, s.alice.id)
    for (const path of [`/api/v1/nodes/${node}/uptime`, `/api/v1/nodes/${node}/uptime/history`, '/api/v1/uptime']) {
      const anonymous = await api.call('GET', path)
      expect(anonymous.status, path).toBe(401)
      const scopeless = await api.call('GET', path, { bearer: s.aliceNoScope })
      expect(scopeless.status, path).toBe(403)
      expect((scopeless.body as { details: string }).details).toContain('nodes:read')
      expect((await api.call('GET', path, { bearer: s.aliceKey })).status, path).toBe(200)
    }
  })

  it("answers another user's node exactly like a missing one; admins see every node", async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db, { clock: new TestClock(at('2026-05-02T00:30:00Z').getTime()) })
    const s = await setup(db, api)
    const node = await story(db, s.alice.id)
    for (const suffix of ['/uptime?window=7d', '/uptime/history?window=7d&granularity=daily']) {
      const foreign = await api.call('GET', `/api/v1/nodes/${node}${suffix}`, { bearer: s.bobKey })
      const unknown = await api.call('GET', `/api/v1/nodes/${UNKNOWN_ID}${suffix}`, { bearer: s.aliceKey })
      const malformed = await api.call('GET', `/api/v1/nodes/not-a-node${suffix}`, { bearer: s.aliceKey })
      const notAdmin = await api.call('GET', `/api/v1/nodes/${node}${suffix}`, { bearer: s.rootUserKey })
      for (const res of [foreign, unknown, malformed, notAdmin]) {
        expect(res.status).toBe(404)
        expect(res.body).toEqual(foreign.body)
      }
      const own = await api.call('GET', `/api/v1/nodes/${node}${suffix}`, { bearer: s.aliceKey })
      const admin = await api.call('GET', `/api/v1/nodes/${node.toUpperCase()}${suffix}`, { bearer: s.adminKey })
      expect(own.status).toBe(200)
      expect(admin.body).toEqual(own.body)
    }
  })

  it('refuses a bad window or granularity with 400 naming the parameter', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const node = await nodeOf(db, s.alice.id, api.clock.now())
    const cases: Array<[string, string]> = [
      [`/api/v1/nodes/${node}/uptime?window=90d`, 'query.window'],
      [`/api/v1/nodes/${node}/uptime?window=`, 'query.window'],
      [`/api/v1/nodes/${node}/uptime/history?window=1y`, 'query.window'],
      [`/api/v1/nodes/${node}/uptime/history?window=7d&granularity=weekly`, 'query.granularity'],
    ]
    for (const [path, field] of cases) {
      const res = await api.call('GET', path, { bearer: s.aliceKey })
      expect(res.status, path).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
      expect((res.body as { details: string }).details).toContain(field)
    }
  })

  it('shows a rollout’s maintenance as planned downtime apart from a migration’s, in the worker’s buckets and the live hours; the SLA figure counts both', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(at('2026-05-02T02:30:00Z').getTime())
    const api = await startAuthApi(resources, db, { clock })
    const s = await setup(db, api)
    const node = await nodeOf(db, s.alice.id, at('2026-05-01T23:00:00Z'))
    await move(db, node, 'syncing', at('2026-05-01T23:05:00Z'), 'provisioning')
    await move(db, node, 'healthy', at('2026-05-01T23:06:00Z'))
    // A rollout's upgrade: 10 minutes of planned maintenance in the 00:00 hour.
    // With the reason the rollout's node upgrade gives (src/rollouts/node-upgrade.ts): the state
    // log's trigger is then "upgrade: <reason>".
    await move(db, node, 'maintenance', at('2026-05-02T00:10:00Z'), 'upgrade', 'upgrade to 1.2.0 (rollout 0193)')
    await move(db, node, 'syncing', at('2026-05-02T00:20:00Z'), 'upgrade', 'upgrade to 1.2.0 (rollout 0193)')
    await move(db, node, 'healthy', at('2026-05-02T00:21:00Z'))
    // A migration: 5 minutes of unplanned maintenance in the current hour.
    await move(db, node, 'maintenance', at('2026-05-02T02:00:00Z'), 'migration')
    await move(db, node, 'syncing', at('2026-05-02T02:05:00Z'), 'migration')
    await move(db, node, 'healthy', at('2026-05-02T02:06:00Z'))
    // The worker has settled 23:00 and 00:00 into buckets; 01:00 and 02:00 come from the log.
    await runUptimeRollup(db, { now: at('2026-05-02T01:05:00Z') })
    const bucket = (await db('uptime_hourly_buckets').where({ node_id: node, bucket_hour: at('2026-05-02T00:00:00Z') }).first()) as Record<string, unknown>
    expect([Number(bucket.downtime_seconds), Number(bucket.planned_downtime_seconds), Boolean(bucket.is_complete)]).toEqual([600, 600, true])

    const day = await api.call('GET', `/api/v1/nodes/${node}/uptime?window=24h`, { bearer: s.aliceKey })
    expect(day.status).toBe(200)
    // Up: 5 min of provisioning, 64 + 99 + 24 min healthy; down: both maintenances, as the SLA figure counts them.
    expect(day.body).toMatchObject({ downtime_seconds: 900, planned_downtime_seconds: 600, unplanned_downtime_seconds: 300, uptime_seconds: 192 * 60, uptime_percentage: 92.753 })
    const hourly = await api.call('GET', `/api/v1/nodes/${node}/uptime/history?window=24h`, { bearer: s.aliceKey })
    type Period = { period_start: string; total_seconds: number; planned_downtime_seconds: number; unplanned_downtime_seconds: number }
    expect((hourly.body as { periods: Period[] }).periods.filter((p) => p.total_seconds > 0).map((p) => [p.period_start.slice(11, 16), p.planned_downtime_seconds, p.unplanned_downtime_seconds])).toEqual([
      ['23:00', 0, 0],
      ['00:00', 600, 0],
      ['01:00', 0, 0],
      ['02:00', 0, 300],
    ])
    // The fleet report carries the split per window too.
    const fleet = await api.call('GET', '/api/v1/uptime', { bearer: s.aliceKey })
    const item = (fleet.body as { items: Array<{ node_id: string; windows: Record<string, { planned_downtime_seconds: number; unplanned_downtime_seconds: number }> }> }).items.find((i) => i.node_id === node)
    expect(item?.windows['30d']).toMatchObject({ planned_downtime_seconds: 600, unplanned_downtime_seconds: 300 })
  })

  it('sums the worker’s buckets and adds the current hour from the state log', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(at('2026-05-02T00:30:00Z').getTime())
    const api = await startAuthApi(resources, db, { clock })
    const s = await setup(db, api)
    const node = await story(db, s.alice.id)
    // The worker last ran at 00:05; what happened since comes from the log.
    await runUptimeRollup(db, { now: at('2026-05-02T00:05:00Z') })

    const day = await api.call('GET', `/api/v1/nodes/${node}/uptime?window=24h`, { bearer: s.aliceKey })
    expect(day.body).toEqual({
      node_id: node,
      window: '24h',
      window_start: '2026-05-01T01:00:00.000Z',
      window_end: '2026-05-02T00:30:00.000Z',
      // 600 + 1800 + 1200 up, 900 + 600 down, 900 unknown: 3600 / 5100.
      uptime_percentage: 70.588,
      uptime_seconds: 3600,
      downtime_seconds: 1500,
      // Heartbeat evaluation's down: nothing planned.
      planned_downtime_seconds: 0,
      unplanned_downtime_seconds: 1500,
      unknown_seconds: 900,
      total_seconds: 6000,
    })
    // Without window: 24h.
    expect((await api.call('GET', `/api/v1/nodes/${node}/uptime`, { bearer: s.aliceKey })).body).toEqual(day.body)

    const daily = await api.call('GET', `/api/v1/nodes/${node}/uptime/history?window=24h&granularity=daily`, { bearer: s.aliceKey })
    expect(daily.body).toMatchObject({
      granularity: 'daily',
      periods: [
        { period_start: '2026-05-01T01:00:00.000Z', period_end: '2026-05-02T00:00:00.000Z', uptime_seconds: 2400, downtime_seconds: 900, unknown_seconds: 900, total_seconds: 4200, uptime_percentage: 72.727 },
        { period_start: '2026-05-02T00:00:00.000Z', period_end: '2026-05-02T00:30:00.000Z', uptime_seconds: 1200, downtime_seconds: 600, unknown_seconds: 0, total_seconds: 1800, uptime_percentage: 66.666 },
      ],
    })
    const hourly = await api.call('GET', `/api/v1/nodes/${node}/uptime/history?window=24h`, { bearer: s.aliceKey })
    const periods = (hourly.body as { periods: Array<{ period_start: string; total_seconds: number; uptime_percentage: number | null }> }).periods
    expect(periods).toHaveLength(24)
    expect(periods.filter((p) => p.total_seconds > 0).map((p) => [p.period_start.slice(11, 16), p.uptime_percentage])).toEqual([
      ['22:00', 100],
      ['23:00', 66.666],
      ['00:00', 66.666],
    ])

    // A node going down now shows at once, before the worker runs again.
    await move(db, node, 'down', at('2026-05-02T00:30:00Z'))
    clock.advance(10 * 60_000)
    const later = (await api.call('GET', `/api/v1/nodes/${node}/uptime?window=30d`, { bearer: s.aliceKey })).body as Record<string, unknown>
    expect(later).toMatchObject({ window_start: '2026-04-02T01:00:00.000Z', uptime_seconds: 3600, downtime_seconds: 2100, unknown_seconds: 900 })
  })

  it('computes the hour that just ended from the log until the worker has finalised its bucket', async () => {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(at('2026-05-02T00:03:00Z').getTime())
    const api = await startAuthApi(resources, db, { clock })
    const s = await setup(db, api)
    const node = await story(db, s.alice.id)
    // The worker last ran at 23:55: its 23:00 bucket is incomplete and stops there (up 1800,
    // down 600, unknown 900). A node created at 23:58 has no bucket at all.
    await runUptimeRollup(db, { now: at('2026-05-01T23:55:00Z') })
    const late = await nodeOf(db, s.alice.id, at('2026-05-01T23:58:00Z'))

    // 22:00 (complete bucket): 600 up. 23:00 from the log: 300 down (provisioning past its
    // grace), 900 unknown, 1800 up, 600 down. 00:00 to 00:03: 180 down.
    // Up 2400, down 1080, unknown 900: 2400 / 3480 = 68.965 %.
    const expected = { uptime_percentage: 68.965, uptime_seconds: 2400, downtime_seconds: 1080, unknown_seconds: 900, total_seconds: 4380 }
    const day = await api.call('GET', `/api/v1/nodes/${node}/uptime?window=24h`, { bearer: s.aliceKey })
    expect(day.body).toMatchObject(expected)
    const week = await api.call('GET', `/api/v1/nodes/${node}/uptime?window=7d`, { bearer: s.aliceKey })
    expect(week.body).toMatchObject(expected)

    const hourly = await api.call('GET', `/api/v1/nodes/${node}/uptime/history?window=24h`, { bearer: s.aliceKey })
    type Period = { period_start: string; uptime_seconds: number; downtime_seconds: number; unknown_seconds: number; total_seconds: number }
    const periods = (hourly.body as { periods: Period[] }).periods
    expect(periods.filter((p) => p.total_seconds > 0).map((p) => [p.period_start.slice(11, 16), p.uptime_seconds, p.downtime_seconds, p.unknown_seconds])).toEqual([
      ['22:00', 600, 0, 0],
      ['23:00', 1800, 900, 900],
      ['00:00', 0, 180, 0],
    ])

    // The late node: 23:58 to 00:03 in its provisioning grace, 120 + 180 s up.
    const lateDay = await api.call('GET', `/api/v1/nodes/${late}/uptime?window=24h`, { bearer: s.aliceKey })
    expect(lateDay.body).toMatchObject({ uptime_percentage: 100, uptime_seconds: 300, downtime_seconds: 0, total_seconds: 300 })

    type Item = { node_id: string; windows: Record<string, Record<string, unknown>> }
    const fleet = (await api.call('GET', '/api/v1/uptime', { bearer: s.aliceKey })).body as { items: Item[] }
    const byId = new Map(fleet.items.map((i) => [i.node_id, i]))
    expect(byId.get(node)?.windows['24h']).toMatchObject(expected)
    expect(byId.get(node)?.windows['30d']).toMatchObject(expected)
    expect(byId.get(late)?.windows['24h']).toMatchObject({ uptime_seconds: 300, total_seconds: 300 })

    // Once the worker has run after the hour, the same figures come from its buckets.
    await runUptimeRollup(db, { now: at('2026-05-02T00:03:00Z') })
    expect((await api.call('GET', `/api/v1/nodes/${node}/uptime?window=24h`, { bearer: s.aliceKey })).body).toEqual(day.body)
    expect((await api.call('GET', `/api/v1/nodes/${late}/uptime?window=24h`, { bearer: s.aliceKey })).body).toEqual(lateDay.body)
  })

  it('reports the fleet: its own nodes to a user, every node to an admin', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db, { clock: new TestClock(at('2026-05-02T00:30:00Z').getTime()) })
    const s = await setup(db, api)
    const aliceNode = await story(db, s.alice.id)
    const bobNode = await nodeOf(db, s.bob.id, at('2026-05-02T00:00:00Z'))
    await runUptimeRollup(db, { now: at('2026-05-02T00:30:00Z') })

    type Item = { node_id: string; windows: Record<string, { uptime_percentage: number | null; uptime_seconds: number }>; daily: unknown[] }
    const mine = (await api.call('GET', '/api/v1/uptime', { bearer: s.aliceKey })).body as { items: Item[] }
    expect(mine.items.map((i) => i.node_id)).toEqual([aliceNode])
    expect(mine.items[0]!.windows['24h']).toMatchObject({ uptime_percentage: 70.588, uptime_seconds: 3600 })
    expect(mine.items[0]!.windows['30d']).toMatchObject({ uptime_percentage: 70.588, window_start: '2026-04-02T01:00:00.000Z' })
    expect(mine.items[0]!.daily).toHaveLength(31)

    const all = (await api.call('GET', '/api/v1/uptime?limit=1', { bearer: s.adminKey })).body as { items: Item[]; next_cursor: string }
    expect(all.items.map((i) => i.node_id)).toEqual([bobNode])
    // Provisioning since 00:00: 10 minutes up, 20 minutes down.
    expect(all.items[0]!.windows['24h']).toMatchObject({ uptime_percentage: 33.333 })
    const next = (await api.call('GET', `/api/v1/uptime?limit=1&cursor=${all.next_cursor}`, { bearer: s.adminKey })).body as { items: Item[] }
    expect(next.items.map((i) => i.node_id)).toEqual([aliceNode])

    const other = await api.call('GET', `/api/v1/uptime?user_id=${s.bob.id}`, { bearer: s.aliceKey })
    expect(other.status).toBe(403)
    const bobs = (await api.call('GET', `/api/v1/uptime?user_id=${s.bob.id}`, { bearer: s.adminKey })).body as { items: Item[] }
    expect(bobs.items.map((i) => i.node_id)).toEqual([bobNode])
  })
})
