/**
 * The incidents' part of the evaluation cycle (`advanceIncidentResolution`, docs/incidents.md)
 * with an injected clock: debounced auto-resolution per category, the categories that never
 * auto-resolve, nodes that are gone, flapping on and off, escalation of long-open warnings, and
 * a statement count that does not grow with the fleet.
 */
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { handleHealthEvent, healthEventSchema, incidentConsumerOptions } from '../../../src/health/incident-consumer.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { advanceIncidentResolution } from '../../../src/health/incident-resolution.js'
import type { FlappingRule } from '../../../src/health/incident-rules.js'
import { createLogger } from '../../../src/log.js'
import { healthEventSubject, type HealthUpdateResult } from '../../../src/nodes/health-state-machine.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { at, change, force, incidentsOf, MINUTE, notificationsOf, ownedNode } from './helpers.js'

const silent = createLogger({ level: 'silent' })
const K = 3
const FLAPPING: FlappingRule = { threshold: 3, windowMs: 15 * MINUTE, quietMs: 15 * MINUTE }

describe.each(DIALECTS)('incident resolution cycle on %s', (dialect) => {
  let t: TestDatabase
  let db: Db

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => {
    await t.destroy()
  })

  /** The consumer's effect for the event a health change wrote (the relay and bus are covered in raising.test.ts). */
  async function consume(result: Promise<HealthUpdateResult>): Promise<void> {
    const { event } = await result
    if (!event) throw new Error('the change wrote no health event')
    await db.transaction((trx) => handleHealthEvent(trx, healthEventSchema.parse(event), { logger: silent, flapping: FLAPPING, now: new Date(event.occurred_at) }))
  }

  const cycle = (now: Date, escalateAfterMs?: number) => advanceIncidentResolution(db, { now, debounce: K, logger: silent, flapping: FLAPPING, ...(escalateAfterMs ? { escalateAfterMs } : {}) })

  it('logs incident lines with one "component" key under the daemon\'s component logger (the consumer and the cycle add none)', async () => {
    const raw: string[] = []
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        raw.push(...chunk.toString('utf8').split('\n').filter((l) => l.trim().length > 0))
        done()
      },
    })
    // As daemons/health-evaluator.ts binds it.
    const logger = pino({ level: 'info' }, sink).child({ component: 'incidents' })
    const bus = createLocalBus()
    const options = incidentConsumerOptions({ bus, db, logger, idempotencyTtlMs: MINUTE, now: () => at(0), flapping: FLAPPING })
    const node = await ownedNode(db, 'healthy')
    const { event } = await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(0))
    if (!event) throw new Error('the change wrote no health event')
    const parsed = healthEventSchema.parse(event)
    const envelope = { subject: healthEventSubject(node.id), messageId: undefined, idempotencyKey: `health-${node.id}-1`, headers: {}, payload: event, deliveryCount: 1 }
    await db.transaction((trx) => options.handle(trx, parsed, envelope))
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(1 * MINUTE))
    for (let i = 1; i <= K; i += 1) await advanceIncidentResolution(db, { now: at((1 + i) * MINUTE), debounce: K, logger, flapping: FLAPPING })
    await bus.close()
    expect(raw.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(['incident opened', 'incident cycle'])
    for (const line of raw) expect(line.match(/"component":/g)).toHaveLength(1)
  })

  it('auto-resolves only after K consecutive recovered cycles; a relapse in between starts the count over', async () => {
    const node = await ownedNode(db, 'healthy')
    await consume(change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(0)))
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(1 * MINUTE))

    expect(await cycle(at(2 * MINUTE))).toMatchObject({ auto_resolved: 0, recovering: 1 })
    expect(await cycle(at(3 * MINUTE))).toMatchObject({ auto_resolved: 0, recovering: 1 })
    expect((await incidentsOf(db, node.id))[0]).toMatchObject({ status: 'open', resolution_debounce: 2 })

    // Degraded is not healthy: the counter goes back to 0, the incident stays open.
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'degraded' }, at(4 * MINUTE))
    await cycle(at(5 * MINUTE))
    expect((await incidentsOf(db, node.id))[0]).toMatchObject({ status: 'open', resolution_debounce: 0 })

    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(6 * MINUTE))
    await cycle(at(7 * MINUTE))
    await cycle(at(8 * MINUTE))
    expect((await incidentsOf(db, node.id))[0]).toMatchObject({ status: 'open', resolution_debounce: 2 })
    expect(await cycle(at(9 * MINUTE))).toMatchObject({ auto_resolved: 1, recovering: 0 })
    const [incident] = await incidentsOf(db, node.id)
    expect(incident).toMatchObject({ status: 'auto_resolved', resolved_at: at(9 * MINUTE).toISOString(), resolved_by: 'auto', resolution_debounce: K })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened', 'incident_resolved'])

    // A later failure is a new incident, not a repeat of the resolved one.
    await consume(change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(40 * MINUTE)))
    const incidents = await incidentsOf(db, node.id)
    expect(incidents.map((i) => [i.status, i.occurrence_count])).toEqual([
      ['auto_resolved', 1],
      ['open', 1],
    ])
  })

  it('uses each category\'s own recovery: app_* on application_health ok, sync_stalled on synced; acknowledged ones too; failures never', async () => {
    const app = await ownedNode(db, 'healthy', { application_health: 'ok', sync_status: 'synced' })
    await consume(change(db, app.id, { writer: 'policy_evaluation', application_health: 'critical' }, at(0)))
    await consume(change(db, app.id, { writer: 'policy_evaluation', application_health: 'degraded' }, at(1 * MINUTE)))
    await consume(change(db, app.id, { writer: 'sync_event', sync_status: 'stalled' }, at(2 * MINUTE)))
    const provisioning = await ownedNode(db, 'provisioning')
    await consume(change(db, provisioning.id, { writer: 'provisioning', state: 'failed' }, at(0), 'provisioning failed: boom'))
    const migrated = await ownedNode(db, 'maintenance')
    await consume(force(db, migrated.id, 'degraded', 'migration failed: restore failed', at(0)))

    // Acknowledged: still auto-resolves (spec: acknowledged -> auto_resolved).
    await db('incidents').where({ node_id: app.id, category: 'sync_stalled' }).update({ status: 'acknowledged' })
    // The node's state is healthy all along: that does not close app or sync incidents.
    for (let i = 0; i < K; i++) await cycle(at((10 + i) * MINUTE))
    const byCategory = async (nodeId: string) => Object.fromEntries((await incidentsOf(db, nodeId)).map((i) => [i.category, i.status]))
    expect(await byCategory(app.id)).toEqual({ app_critical: 'open', app_degraded: 'open', sync_stalled: 'acknowledged' })

    await change(db, app.id, { writer: 'sync_event', sync_status: 'synced' }, at(20 * MINUTE))
    for (let i = 0; i < K; i++) await cycle(at((21 + i) * MINUTE))
    expect(await byCategory(app.id)).toEqual({ app_critical: 'open', app_degraded: 'open', sync_stalled: 'auto_resolved' })

    await change(db, app.id, { writer: 'policy_evaluation', application_health: 'ok' }, at(30 * MINUTE))
    for (let i = 0; i < K; i++) await cycle(at((31 + i) * MINUTE))
    expect(await byCategory(app.id)).toEqual({ app_critical: 'auto_resolved', app_degraded: 'auto_resolved', sync_stalled: 'auto_resolved' })

    // The migrated node recovers, the failed one cannot: both failures stay open for a person.
    await change(db, migrated.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(40 * MINUTE))
    for (let i = 0; i < 2 * K; i++) await cycle(at((41 + i) * MINUTE))
    expect(await byCategory(provisioning.id)).toEqual({ provision_failed: 'open' })
    expect(await byCategory(migrated.id)).toEqual({ migration_failed: 'open' })
    expect((await incidentsOf(db, migrated.id))[0]?.resolution_debounce).toBe(0)
  })

  it('auto-resolves at once, silently, the incidents of a node that was deleted or terminated; the incident outlives the node', async () => {
    const deleted = await ownedNode(db, 'healthy')
    await consume(change(db, deleted.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(0)))
    const terminated = await ownedNode(db, 'provisioning')
    await consume(change(db, terminated.id, { writer: 'provisioning', state: 'failed' }, at(0), 'provisioning failed: boom'))
    const kept = await ownedNode(db, 'healthy')
    await consume(change(db, kept.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(0)))

    await db('nodes').where({ id: deleted.id }).del()
    await db('subscriptions').where({ id: deleted.subscriptionId }).del()
    await db('subscriptions').where({ id: terminated.subscriptionId }).update({ status: 'terminated' })

    expect(await cycle(at(5 * MINUTE))).toMatchObject({ node_gone: 2, auto_resolved: 0 })
    expect(await incidentsOf(db, deleted.id)).toEqual([
      expect.objectContaining({ node_id: deleted.id, subscription_id: deleted.subscriptionId, user_id: deleted.userId, category: 'node_down', status: 'auto_resolved', resolved_by: 'auto:node_gone', resolved_at: at(5 * MINUTE).toISOString() }),
    ])
    expect((await incidentsOf(db, terminated.id))[0]).toMatchObject({ category: 'provision_failed', status: 'auto_resolved', resolved_by: 'auto:node_gone' })
    expect((await incidentsOf(db, kept.id))[0]).toMatchObject({ status: 'open' })
    expect((await notificationsOf(db, deleted.userId)).map((n) => n.kind)).toEqual(['incident_opened'])
  })

  it('marks a node flapping at the 3rd transition within the window, holds back notifications and resolution, and clears it after the quiet period', async () => {
    const node = await ownedNode(db, 'healthy')
    const down = (minute: number) => consume(change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(minute * MINUTE)))
    const up = (minute: number) => change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(minute * MINUTE))
    const cycles = async (fromMinute: number, count: number) => {
      for (let i = 0; i < count; i++) await cycle(at((fromMinute + i) * MINUTE))
    }

    // Twice down, recovered and resolved: ordinary incidents, each told.
    await down(0)
    await up(1)
    await cycles(1, K)
    await down(4)
    await up(5)
    await cycles(5, K)
    expect((await incidentsOf(db, node.id)).map((i) => [i.status, i.is_flapping])).toEqual([
      ['auto_resolved', false],
      ['auto_resolved', false],
    ])

    // The third transition within 15 minutes: a flapping incident, announced once as such.
    await down(8)
    await up(9)
    const third = () => incidentsOf(db, node.id).then((all) => all[2])
    expect(await third()).toMatchObject({ status: 'open', is_flapping: true })
    // While flapping it neither resolves nor says anything more, however often it comes back.
    await cycles(9, 2 * K)
    expect(await third()).toMatchObject({ status: 'open', is_flapping: true, resolution_debounce: 0 })
    await down(16)
    await up(17)
    await cycles(17, K)
    expect(await third()).toMatchObject({ status: 'open', is_flapping: true, occurrence_count: 2, last_seen_at: at(16 * MINUTE).toISOString() })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened', 'incident_resolved', 'incident_opened', 'incident_resolved', 'incident_flapping'])

    // 15 quiet minutes after the last transition (minute 16): flapping ends; K recovered cycles later it resolves, and says so.
    expect(await cycle(at(30 * MINUTE))).toMatchObject({ flapping_cleared: 0 })
    expect(await cycle(at(31 * MINUTE))).toMatchObject({ flapping_cleared: 1, recovering: 1 })
    await cycles(32, K - 1)
    expect(await third()).toMatchObject({ status: 'auto_resolved', is_flapping: false, resolved_at: at(33 * MINUTE).toISOString() })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual([
      'incident_opened',
      'incident_resolved',
      'incident_opened',
      'incident_resolved',
      'incident_flapping',
      'incident_resolved',
    ])
    expect(await incidentsOf(db, node.id)).toHaveLength(3)

    // Transitions spread wider than the window never flap.
    const calm = await ownedNode(db, 'healthy')
    for (const minute of [100, 120, 140]) {
      await consume(change(db, calm.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(minute * MINUTE)))
      await change(db, calm.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at((minute + 1) * MINUTE))
      for (let i = 0; i < K; i++) await cycle(at((minute + 2 + i) * MINUTE))
    }
    expect((await incidentsOf(db, calm.id)).map((i) => [i.status, i.is_flapping])).toEqual([
      ['auto_resolved', false],
      ['auto_resolved', false],
      ['auto_resolved', false],
    ])
  })

  it('escalates an open warning left unrecovered past the delay to critical, once and with a notification; not an acknowledged one', async () => {
    const stalled = await ownedNode(db, 'healthy', { sync_status: 'synced' })
    await consume(change(db, stalled.id, { writer: 'sync_event', sync_status: 'stalled' }, at(0)))
    const acked = await ownedNode(db, 'healthy', { application_health: 'ok' })
    await consume(change(db, acked.id, { writer: 'policy_evaluation', application_health: 'degraded' }, at(0)))
    await db('incidents').where({ node_id: acked.id }).update({ status: 'acknowledged' })

    expect(await cycle(at(59 * MINUTE), 60 * MINUTE)).toMatchObject({ escalated: 0 })
    expect(await cycle(at(60 * MINUTE), 60 * MINUTE)).toMatchObject({ escalated: 1 })
    expect(await cycle(at(61 * MINUTE), 60 * MINUTE)).toMatchObject({ escalated: 0 })
    expect((await incidentsOf(db, stalled.id))[0]).toMatchObject({ category: 'sync_stalled', severity: 'critical', escalated_at: at(60 * MINUTE).toISOString(), status: 'open' })
    expect((await incidentsOf(db, acked.id))[0]).toMatchObject({ severity: 'warning', escalated_at: null })
    const notes = await notificationsOf(db, stalled.userId)
    expect(notes.map((n) => n.kind)).toEqual(['incident_opened', 'incident_escalated'])
    expect(notes[1]?.title).toContain('critical')
  })

  it('runs the same few statements per cycle for 2 incidents as for 40', async () => {
    const statements = async (incidents: number): Promise<number> => {
      for (let i = 0; i < incidents; i++) {
        const node = await ownedNode(db, 'healthy')
        await consume(change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(0)))
        await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(MINUTE))
      }
      let count = 0
      const onQuery = () => count++
      db.on('query', onQuery)
      try {
        await cycle(at(2 * MINUTE))
      } finally {
        db.off('query', onQuery)
      }
      await db('incidents').del()
      return count
    }
    const few = await statements(2)
    const many = await statements(40)
    expect(many).toBe(few)
    expect(few).toBeLessThanOrEqual(14)
  })
})
