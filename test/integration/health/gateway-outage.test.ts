/**
 * Heartbeat evaluation while no agent-gateway was receiving (issue 22, item 1), on both databases:
 * a missed heartbeat counts only once some gateway has been receiving for the whole timeout, so
 * an outage of the gateways themselves never takes a healthy fleet down; a node whose agent stays
 * silent after the gateways are back still goes down, a timeout later. A real gateway records its
 * presence while it listens and withdraws it when it closes.
 */
import { expect, it } from 'vitest'
import { heartbeatsReceivedSince, recordGatewayPresence } from '../../../src/agent-gateway/gateway-presence.js'
import type { Db } from '../../../src/db/knex.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { startGateway } from '../agent-gateway/harness.js'
import { at, freshDatabases, healthEvents, logger, nodeNow, nodeWith, SECOND, SETTINGS, T0 } from './support.js'

describeEachDialectConcurrently('heartbeat evaluation across a gateway outage on %s', (dialect) => {
  const { database } = freshDatabases(dialect)
  const cycle = (db: Db, ms: number) => evaluateHeartbeats(db, { now: at(ms), heartbeatTimeoutMs: SETTINGS.heartbeatTimeoutMs, intervalMs: SETTINGS.intervalMs, logger })
  const INTERVAL = SETTINGS.intervalMs
  const TIMEOUT = SETTINGS.heartbeatTimeoutMs

  it('counts nothing while every gateway is gone, and counts a silent node only a timeout after one is back', async () => {
    const db = await database({ gateway: false })
    // The only gateway was last seen 2 minutes before T0 (killed), and comes back at T0 + 90 s.
    await recordGatewayPresence(db, 'gateway-killed', at(-3_600 * SECOND), at(-120 * SECOND))
    const silent = await nodeWith(db, { state: 'healthy', heartbeatAt: -150 * SECOND })
    const counted = await nodeWith(db, { state: 'degraded', heartbeatAt: -150 * SECOND, consecutiveFailures: 3 })

    for (let t = 0; t < 90 * SECOND; t += INTERVAL) {
      const result = await cycle(db, t)
      expect(result).toMatchObject({ counted: 0, moves: [], receivingSince: null })
    }
    expect(await nodeNow(db, silent)).toMatchObject({ state: 'healthy', consecutive_failures: 0 })
    // A counter left at 3 from before the outage does not take its node down either.
    expect(await nodeNow(db, counted)).toMatchObject({ state: 'degraded', consecutive_failures: 3 })

    await recordGatewayPresence(db, 'gateway-restarted', at(90 * SECOND), at(10 * 3_600 * SECOND))
    for (let t = 90 * SECOND; t < 90 * SECOND + TIMEOUT; t += INTERVAL) {
      const result = await cycle(db, t)
      expect(result).toMatchObject({ counted: 0, moves: [] })
      expect(result.receivingSince?.toISOString()).toBe(at(90 * SECOND).toISOString())
    }
    expect(await healthEvents(db, silent)).toEqual([])

    // A whole timeout after the gateway came back, the node's agent is still silent: its own fault.
    const start = 90 * SECOND + TIMEOUT
    const first = await cycle(db, start)
    expect(first.counted).toBe(2)
    expect(first.moves).toEqual([{ node_id: counted, from: 'degraded', to: 'down' }])
    await cycle(db, start + INTERVAL)
    const third = await cycle(db, start + 2 * INTERVAL)
    expect(third.moves).toEqual([{ node_id: silent, from: 'healthy', to: 'down' }])
  })

  it('keeps counting through a rolling restart in which one gateway took over before the other lapsed', async () => {
    const db = await database({ gateway: false })
    await recordGatewayPresence(db, 'gateway-old', at(-3_600 * SECOND), at(-30 * SECOND))
    await recordGatewayPresence(db, 'gateway-new', at(-40 * SECOND), at(3_600 * SECOND))
    const silent = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })
    const result = await cycle(db, 0)
    expect(result.counted).toBe(1)
    expect(result.receivingSince?.getTime()).toBeLessThanOrEqual(T0 - TIMEOUT)
    expect((await nodeNow(db, silent)).consecutive_failures).toBe(1)
  })

  it('treats a gap between two gateways as an outage: timeouts counted only a timeout after the second began', async () => {
    const db = await database({ gateway: false })
    await recordGatewayPresence(db, 'gateway-a', at(-3_600 * SECOND), at(-50 * SECOND))
    await recordGatewayPresence(db, 'gateway-b', at(-20 * SECOND), at(3_600 * SECOND))
    const silent = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })
    expect(await cycle(db, 0)).toMatchObject({ counted: 0 })
    expect((await cycle(db, 0)).receivingSince?.toISOString()).toBe(at(-20 * SECOND).toISOString())
    expect(await cycle(db, 40 * SECOND)).toMatchObject({ counted: 1 })
    expect((await nodeNow(db, silent)).consecutive_failures).toBe(1)
  })

  it('a real gateway is present from when it listens until it closes', async () => {
    const db = await database({ gateway: false })
    const before = new Date()
    const gateway = await startGateway(db, { presenceIntervalMs: 60_000 })
    const horizon = new Date(before.getTime() - 3_600_000)
    const since = await heartbeatsReceivedSince(db, new Date(), horizon)
    expect(since?.getTime()).toBeGreaterThanOrEqual(before.getTime())
    expect(since?.getTime()).toBeLessThanOrEqual(Date.now())
    await gateway.stop()
    expect(await heartbeatsReceivedSince(db, new Date(Date.now() + 1), horizon)).toBeNull()
  })
})
