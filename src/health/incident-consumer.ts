/**
 * Incidents raised from health events (spec: "Every node state or dimension change produces a
 * health event that drives incident creation"; docs/incidents.md). Durable consumer
 * `health-incidents` on `events.node.*.health_changed` (stream EVENTS), run through
 * `runConsumer`: the idempotency key commits with the incident and its notification, a
 * malformed message is acked and dropped, a payload this version cannot decode is redelivered.
 *
 * The event's own time (`occurred_at`) is the occurrence's time: first/last_seen_at and the
 * flapping window describe when the node changed, not when this consumer caught up.
 */
import { z } from 'zod'
import type { Db, Tx } from '../db/knex.js'
import type { BusSubscription, EventBus } from '../events/bus.js'
import { runConsumer, type ConsumerOptions } from '../events/consumer.js'
import type { Logger } from '../log.js'
import type { HealthEvent } from '../nodes/health-state-machine.js'
import { raiseIncident, type RaisedIncident } from './incident-store.js'
import { categoryForHealthEvent, DEFAULT_INCIDENT_SETTINGS, incidentTitle, type FlappingRule, type IncidentCategory } from './incident-rules.js'

export const INCIDENT_CONSUMER_DURABLE = 'health-incidents'
export const INCIDENT_CONSUMER_SUBJECT = 'events.node.*.health_changed'

/** The fields of a HealthEvent (src/nodes/health-state-machine.ts) this consumer reads. */
export const healthEventSchema = z.object({
  event_id: z.string().min(1),
  node_id: z.string().uuid(),
  subscription_id: z.string().uuid(),
  chain_profile_id: z.string().min(1),
  writer: z.string().min(1),
  dimension: z.enum(['state', 'application_health', 'sync_status']),
  from: z.string(),
  to: z.string(),
  forced: z.boolean(),
  reason: z.string().nullable(),
  current: z.object({ display_state: z.string() }),
  version: z.number().int(),
  occurred_at: z.string().datetime({ offset: true }),
})

export type DecodedHealthEvent = z.infer<typeof healthEventSchema>

// Compile-time check that the schema still describes the producer's type.
type _ProducerFits = HealthEvent extends DecodedHealthEvent ? true : never
const _producerFits: _ProducerFits = true
void _producerFits

function describe(category: IncidentCategory, event: DecodedHealthEvent): string {
  const why = event.reason ? ` (${event.reason})` : ''
  const node = `Node ${event.node_id}`
  switch (category) {
    case 'node_down':
      return `${node} moved from ${event.from} to down${why}.`
    case 'app_critical':
    case 'app_degraded':
      return `${node}: application health went from ${event.from} to ${event.to}${why}.`
    case 'sync_stalled':
      return `${node}: the agent reports that the chain head stopped moving (sync ${event.from} -> stalled)${why}.`
    case 'provision_failed':
      return `${node}: provisioning failed${why}. Its host and keys were removed; the node is ${event.to}.`
    case 'migration_failed':
      return `${node}: the migration to a new host failed${why}; the node is ${event.to}.`
    case 'payment_unconfirmed':
      // Raised by the payment consumer, never from a health event.
      return `${node}: ${event.reason ?? 'payment event not confirmed'}.`
    case 'sync_flapping':
      // Raised by the agent-gateway's sync rate limit (sync-flapping.ts), never from a health event.
      return `${node}: the agent's sync status keeps changing${why}.`
  }
}

/**
 * The consumer's effect for one health event, in the consumer's transaction. Returns what was
 * raised, or null when the event raises no incident (most events: recoveries, syncing, …).
 */
export async function handleHealthEvent(trx: Tx, event: DecodedHealthEvent, deps: { logger: Logger; flapping: FlappingRule; now: Date }): Promise<RaisedIncident | null> {
  const category = categoryForHealthEvent(event)
  if (!category) return null
  const raised = await raiseIncident(
    trx,
    {
      nodeId: event.node_id,
      subscriptionId: event.subscription_id,
      chainProfileId: event.chain_profile_id,
      category,
      occurredAt: new Date(event.occurred_at),
      title: incidentTitle(category, event.chain_profile_id, event.node_id),
      description: describe(category, event),
      metadata: {
        trigger: 'health_event',
        event_id: event.event_id,
        dimension: event.dimension,
        from: event.from,
        to: event.to,
        writer: event.writer,
        forced: event.forced,
        reason: event.reason,
        display_state: event.current.display_state,
      },
    },
    deps.flapping,
    deps.now,
  )
  deps.logger.info(
    { incident_id: raised.incident.id, node_id: event.node_id, category, outcome: raised.outcome, occurrence_count: raised.incident.occurrence_count, is_flapping: raised.incident.is_flapping },
    raised.outcome === 'opened' ? 'incident opened' : 'incident occurred again',
  )
  return raised
}

export interface IncidentConsumerDeps {
  bus: EventBus
  /** The control-plane database (nodes, incidents, notifications, idempotency keys). */
  db: Db
  /** Bound to `component: 'incidents'` by the daemon (a second binding would repeat the key in every line). */
  logger: Logger
  /** IDEMPOTENCY_KEY_TTL. */
  idempotencyTtlMs: number
  now?: () => Date
  /** INCIDENT_FLAP_THRESHOLD / _WINDOW / _QUIET; the defaults of docs/incidents.md when absent. */
  flapping?: FlappingRule
  /** Messages handled at once by this process (default 1). */
  concurrency?: number
  retryDelayMs?: ConsumerOptions<DecodedHealthEvent>['retryDelayMs']
  onOutcome?: ConsumerOptions<DecodedHealthEvent>['onOutcome']
}

/** The consumer's options, for `runConsumer` or a caller driving `createEventHandler` itself. */
export function incidentConsumerOptions(deps: IncidentConsumerDeps): ConsumerOptions<DecodedHealthEvent> {
  const now = deps.now ?? (() => new Date())
  const flapping = deps.flapping ?? DEFAULT_INCIDENT_SETTINGS.flapping
  return {
    bus: deps.bus,
    db: deps.db,
    logger: deps.logger,
    durable: INCIDENT_CONSUMER_DURABLE,
    subject: INCIDENT_CONSUMER_SUBJECT,
    ttlMs: deps.idempotencyTtlMs,
    now,
    decode: (payload) => healthEventSchema.parse(payload),
    handle: async (trx, event) => {
      await handleHealthEvent(trx, event, { logger: deps.logger, flapping, now: now() })
    },
    ...(deps.retryDelayMs ? { retryDelayMs: deps.retryDelayMs } : {}),
    ...(deps.onOutcome ? { onOutcome: deps.onOutcome } : {}),
    ...(deps.concurrency ? { concurrency: deps.concurrency } : {}),
  }
}

/** Subscribes the durable consumer `health-incidents`; close the returned subscription to stop. */
export function startIncidentConsumer(deps: IncidentConsumerDeps): Promise<BusSubscription> {
  return runConsumer(incidentConsumerOptions(deps))
}
