/**
 * Incidents raised from health events (docs/incidents.md): real `applyHealthUpdate` /
 * `forceNodeState` calls write health events to the outbox, the real relay publishes them on the
 * in-process bus, and the durable consumer `health-incidents` raises incidents. The trigger
 * table for every category, the dedup rule (also under concurrent handlers), redeliveries, and
 * the consumer table for malformed and undecodable messages.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import type { BusMessage, BusSubscription } from '../../../src/events/bus.js'
import { createEventHandler, type ConsumerOutcome } from '../../../src/events/consumer.js'
import { encodePayload } from '../../../src/events/envelope.js'
import { createLocalBus, type LocalBus } from '../../../src/events/local-bus.js'
import { OutboxRelay } from '../../../src/events/relay.js'
import { handleHealthEvent, healthEventSchema, INCIDENT_CONSUMER_DURABLE, incidentConsumerOptions, startIncidentConsumer } from '../../../src/health/incident-consumer.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../../../src/health/incident-rules.js'
import { raiseUpgradeFailureIncident } from '../../../src/health/incident-upgrade.js'
import { createLogger } from '../../../src/log.js'
import { healthEventSubject, type HealthEvent } from '../../../src/nodes/health-state-machine.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { at, change, force, incidentsOf, MINUTE, notificationsOf, ownedNode } from './helpers.js'

const TTL_MS = 7 * 86_400_000
const silent = createLogger({ level: 'silent' })
const processingTime = at(30 * MINUTE)

async function healthEvents(db: Db, nodeId: string): Promise<Array<{ event: HealthEvent; messageId: string }>> {
  const rows = (await db('outbox').where({ subject: healthEventSubject(nodeId) }).orderBy('id').select('payload', 'message_id')) as Array<{ payload: unknown; message_id: string }>
  return rows.map((r) => ({ event: fromJson<HealthEvent>(r.payload), messageId: String(r.message_id) }))
}

function message(event: HealthEvent, messageId: string, deliveryCount = 1, settled: string[] = []): BusMessage {
  return {
    subject: healthEventSubject(event.node_id),
    data: encodePayload(event as unknown as Record<string, unknown>),
    messageId,
    headers: {},
    deliveryCount,
    ack: () => settled.push('ack'),
    nak: () => settled.push('nak'),
    term: () => settled.push('term'),
  }
}

describe.each(DIALECTS)('incidents from health events on %s', (dialect) => {
  let t: TestDatabase
  let bus: LocalBus
  let relay: OutboxRelay
  let subscription: BusSubscription | undefined
  let seen: ConsumerOutcome[]

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    bus = createLocalBus()
    relay = new OutboxRelay({ db: t.db, bus, logger: silent, wakeOnCommit: false })
    seen = []
    subscription = await startIncidentConsumer({ bus, db: t.db, logger: silent, idempotencyTtlMs: TTL_MS, now: () => processingTime, retryDelayMs: () => 10, onOutcome: (o) => seen.push(o) })
  })

  afterEach(async () => {
    await subscription?.close()
    await bus.close()
    await t.destroy()
  })

  /** Relays every committed health event and waits until the consumer settled all of them. */
  async function deliver(): Promise<void> {
    while ((await relay.runOnce()) > 0) {
      // until the outbox is drained
    }
    await waitFor(async () => bus.pending(INCIDENT_CONSUMER_DURABLE) === 0, 'every health event to be consumed')
  }

  it('raises one incident per category of the spec table, with its severity, owner and trigger, and tells the owner', async () => {
    const db = t.db
    const down = await ownedNode(db, 'healthy')
    const critical = await ownedNode(db, 'healthy', { application_health: 'ok' })
    const degraded = await ownedNode(db, 'healthy', { application_health: 'ok' })
    const stalled = await ownedNode(db, 'healthy', { sync_status: 'synced' })
    const provisioning = await ownedNode(db, 'provisioning')
    const migrationNoHost = await ownedNode(db, 'maintenance')
    const migrationRestored = await ownedNode(db, 'maintenance')
    const provisionForced = await ownedNode(db, 'syncing')

    await change(db, down.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(1 * MINUTE), '3 missed heartbeats')
    await change(db, critical.id, { writer: 'policy_evaluation', application_health: 'critical' }, at(2 * MINUTE))
    await change(db, degraded.id, { writer: 'policy_evaluation', application_health: 'degraded' }, at(3 * MINUTE))
    await change(db, stalled.id, { writer: 'sync_event', sync_status: 'stalled' }, at(4 * MINUTE))
    // The provision workflow's markFailed: through the table from provisioning …
    await change(db, provisioning.id, { writer: 'provisioning', state: 'failed' }, at(5 * MINUTE), 'provisioning failed: agent never registered')
    // … and forced from anywhere else.
    await force(db, provisionForced.id, 'failed', 'provisioning failed: start command failed', at(6 * MINUTE))
    // The migrate workflow's leaveMaintenance: `failed` before a new host existed, `degraded` after.
    await force(db, migrationNoHost.id, 'failed', 'migration failed: no capacity', at(7 * MINUTE))
    await force(db, migrationRestored.id, 'degraded', 'migration failed: restore failed', at(8 * MINUTE))
    await deliver()

    const expected = [
      [down, 'node_down', 'critical', 1],
      [critical, 'app_critical', 'critical', 2],
      [degraded, 'app_degraded', 'warning', 3],
      [stalled, 'sync_stalled', 'warning', 4],
      [provisioning, 'provision_failed', 'critical', 5],
      [provisionForced, 'provision_failed', 'critical', 6],
      [migrationNoHost, 'migration_failed', 'critical', 7],
      [migrationRestored, 'migration_failed', 'critical', 8],
    ] as const
    for (const [node, category, severity, minute] of expected) {
      const incidents = await incidentsOf(db, node.id)
      expect(incidents, category).toHaveLength(1)
      const incident = incidents[0]
      expect(incident).toMatchObject({
        node_id: node.id,
        subscription_id: node.subscriptionId,
        user_id: node.userId,
        chain_profile_id: 'devnet',
        category,
        severity,
        status: 'open',
        occurrence_count: 1,
        first_seen_at: at(minute * MINUTE).toISOString(),
        last_seen_at: at(minute * MINUTE).toISOString(),
        is_flapping: false,
        resolution_debounce: 0,
        acknowledged_at: null,
        resolved_at: null,
      })
      expect(incident?.created_at).toBe(processingTime.toISOString())
      expect(incident?.title).toContain(node.id.slice(0, 8))
      expect(incident?.metadata).toMatchObject({ trigger: 'health_event' })
      const notes = await notificationsOf(db, node.userId)
      expect(notes).toEqual([expect.objectContaining({ kind: 'incident_opened', data: { incident_id: incident?.id, node_id: node.id, category, severity, status: 'open' } })])
    }
    expect((await incidentsOf(db, down.id))[0]?.description).toContain('3 missed heartbeats')
    expect((await incidentsOf(db, migrationRestored.id))[0]?.metadata).toMatchObject({ dimension: 'state', from: 'maintenance', to: 'degraded', forced: true, writer: 'compensation' })
    expect(seen.filter((o) => o === 'processed')).toHaveLength(8)
  })

  it('raises nothing for changes outside the table: recoveries, syncing, degraded state, termination, other compensations', async () => {
    const db = t.db
    const node = await ownedNode(db, 'syncing', { sync_status: 'syncing', application_health: 'unknown' })
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(1 * MINUTE))
    await change(db, node.id, { writer: 'sync_event', sync_status: 'synced' }, at(2 * MINUTE))
    await change(db, node.id, { writer: 'policy_evaluation', application_health: 'ok' }, at(3 * MINUTE))
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'degraded' }, at(4 * MINUTE))
    await change(db, node.id, { writer: 'upgrade', state: 'maintenance' }, at(5 * MINUTE))
    // A compensation out of maintenance that is not a failed migration (e.g. an upgrade's own).
    await force(db, node.id, 'degraded', 'upgrade compensation restored the previous binary', at(6 * MINUTE))
    await change(db, node.id, { writer: 'termination', state: 'terminating' }, at(7 * MINUTE))
    await change(db, node.id, { writer: 'termination', state: 'terminated' }, at(8 * MINUTE))
    await deliver()
    expect(seen.filter((o) => o === 'processed')).toHaveLength(8)
    expect(await incidentsOf(db, node.id)).toEqual([])
    expect(await notificationsOf(db, node.userId)).toEqual([])
  })

  it('counts a repeat on the unresolved incident (occurrence_count, last_seen_at) and notifies once; a redelivery counts nothing', async () => {
    const db = t.db
    const node = await ownedNode(db, 'healthy')
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(1 * MINUTE))
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(2 * MINUTE))
    await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(3 * MINUTE), 'timed out again')
    await deliver()

    const [incident] = await incidentsOf(db, node.id)
    expect(await incidentsOf(db, node.id)).toHaveLength(1)
    expect(incident).toMatchObject({ category: 'node_down', occurrence_count: 2, first_seen_at: at(1 * MINUTE).toISOString(), last_seen_at: at(3 * MINUTE).toISOString(), version: 2 })
    expect(incident?.metadata).toMatchObject({ from: 'healthy', to: 'down', last_occurrence: { reason: 'timed out again', occurred_at: at(3 * MINUTE).toISOString() } })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened'])

    // The consumer was killed after its commit, before the ack: the bus delivers the event again.
    const downEvents = (await healthEvents(db, node.id)).filter((e) => e.event.to === 'down')
    const last = downEvents[1]
    if (!last) throw new Error('no second down event')
    const handler = createEventHandler(incidentConsumerOptions({ bus, db, logger: silent, idempotencyTtlMs: TTL_MS, now: () => processingTime }))
    const settled: string[] = []
    expect(await handler(message(last.event, last.messageId, 2, settled))).toBe('duplicate')
    expect(settled).toEqual(['ack'])
    expect((await incidentsOf(db, node.id))[0]?.occurrence_count).toBe(2)
  })

  it('keeps one incident per (node, category) when handlers of several occurrences run at the same time', async () => {
    const db = t.db
    const node = await ownedNode(db, 'healthy')
    for (let i = 0; i < 4; i++) {
      await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at((2 * i + 1) * MINUTE))
      await change(db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at((2 * i + 2) * MINUTE))
    }
    const downs = (await healthEvents(db, node.id)).filter((e) => e.event.to === 'down')
    expect(downs).toHaveLength(4)
    // Own connection pools on Postgres: four transactions really in flight at once. SQLite has
    // one writer; its pool serialises them.
    const handlers = downs.map(() => {
      const pool = dialect === 'postgres' ? t.connect() : db
      return createEventHandler(incidentConsumerOptions({ bus, db: pool, logger: silent, idempotencyTtlMs: TTL_MS, now: () => processingTime, flapping: { threshold: 100, windowMs: MINUTE, quietMs: MINUTE } }))
    })
    const outcomes = await Promise.all(downs.map((d, i) => (handlers[i] as (m: BusMessage) => Promise<ConsumerOutcome>)(message(d.event, d.messageId))))
    expect(outcomes).toEqual(['processed', 'processed', 'processed', 'processed'])
    const incidents = await incidentsOf(db, node.id)
    expect(incidents).toHaveLength(1)
    expect(incidents[0]).toMatchObject({ status: 'open', occurrence_count: 4, first_seen_at: at(1 * MINUTE).toISOString(), last_seen_at: at(7 * MINUTE).toISOString() })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened'])
  })

  it('acks a malformed message, redelivers one it cannot decode, and has raised nothing for either', async () => {
    const db = t.db
    const node = await ownedNode(db, 'healthy')
    const handler = createEventHandler(incidentConsumerOptions({ bus, db, logger: silent, idempotencyTtlMs: TTL_MS, now: () => processingTime }))
    const settled: string[] = []
    const base = { subject: healthEventSubject(node.id), headers: {}, deliveryCount: 1, ack: () => settled.push('ack'), nak: () => settled.push('nak'), term: () => settled.push('term') }
    expect(await handler({ ...base, messageId: 'm-1', data: new TextEncoder().encode('not json') })).toBe('malformed')
    expect(await handler({ ...base, messageId: 'm-2', data: encodePayload({ node_id: node.id, dimension: 'state', to: 'down' }) })).toBe('undecodable')
    expect(settled).toEqual(['ack', 'nak'])
    expect(await incidentsOf(db, node.id)).toEqual([])
  })

  it('raises a critical incident for an upgrade that failed and could not be rolled back, deduplicated with migration failures', async () => {
    const db = t.db
    const node = await ownedNode(db, 'degraded')
    const raised = await db.transaction((trx) => raiseUpgradeFailureIncident(trx, { nodeId: node.id, rolloutId: 'r-1', sourceVersion: '1.0.0', targetVersion: '1.1.0', reason: 'StartNode compensation failed', now: at(MINUTE) }))
    expect(raised.outcome).toBe('opened')
    expect(raised.incident).toMatchObject({ category: 'migration_failed', severity: 'critical', status: 'open', user_id: node.userId })
    expect(raised.incident.metadata).toMatchObject({ trigger: 'upgrade_failed_rollback', rollout_id: 'r-1', upgrade_phase: 'failed_rollback' })
    expect(raised.incident.title).toContain('upgrade failed and could not be rolled back')
    const again = await db.transaction((trx) => raiseUpgradeFailureIncident(trx, { nodeId: node.id, rolloutId: 'r-2', reason: 'again', now: at(2 * MINUTE) }))
    expect(again).toMatchObject({ outcome: 'repeated', incident: { id: raised.incident.id, occurrence_count: 2 } })
    expect((await notificationsOf(db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened'])
  })
})

describe('the dedup race on postgres', () => {
  it('turns the loser of two concurrent first occurrences into a repeat of the winner (unique violation retried as an update)', async () => {
    const t = await createTestDatabase('postgres')
    try {
      const node = await ownedNode(t.db, 'healthy')
      await change(t.db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(1 * MINUTE))
      await change(t.db, node.id, { writer: 'heartbeat_evaluation', state: 'healthy' }, at(2 * MINUTE))
      await change(t.db, node.id, { writer: 'heartbeat_evaluation', state: 'down' }, at(3 * MINUTE))
      const [first, second] = (await healthEvents(t.db, node.id)).filter((e) => e.event.to === 'down')
      if (!first || !second) throw new Error('expected two down events')
      const poolA = t.connect()
      const poolB = t.connect()
      const bus = createLocalBus()
      const options = (db: Db) => incidentConsumerOptions({ bus, db, logger: silent, idempotencyTtlMs: TTL_MS, now: () => processingTime })

      // A has inserted its incident but not committed; B's insert must wait on the unique index.
      const trxA = await poolA.transaction()
      await handleHealthEvent(trxA, healthEventSchema.parse(first.event), { logger: silent, flapping: DEFAULT_INCIDENT_SETTINGS.flapping, now: processingTime })
      const b = createEventHandler(options(poolB))(message(second.event, second.messageId))
      const database = String((await poolB.raw('select current_database() as d')).rows[0].d)
      await waitFor(async () => {
        const waiting = await poolA.raw(`select count(*)::int as n from pg_stat_activity where datname = ? and wait_event_type = 'Lock'`, [database])
        return Number(waiting.rows[0].n) > 0
      }, "B's insert to wait for A")
      await trxA.commit()

      expect(await b).toBe('processed')
      const incidents = await incidentsOf(t.db, node.id)
      expect(incidents).toHaveLength(1)
      expect(incidents[0]).toMatchObject({ occurrence_count: 2, first_seen_at: at(1 * MINUTE).toISOString(), last_seen_at: at(3 * MINUTE).toISOString() })
      expect((await notificationsOf(t.db, node.userId)).map((n) => n.kind)).toEqual(['incident_opened'])
      await bus.close()
    } finally {
      await t.destroy()
    }
  })
})
