/**
 * Gateway presence (issue 22, item 1): whether any agent-gateway was there to receive heartbeats.
 *
 * Each gateway process writes one row when it starts listening (`started_at`) and pushes
 * `live_until` forward every presence interval while it runs (to two intervals ahead). A gateway
 * killed outright stops writing; its row lapses at `live_until`. Rows lapsed for a day are pruned
 * by the gateways.
 *
 * The heartbeat evaluation asks `heartbeatsReceivedSince`: the start of the unbroken stretch of
 * time, ending now, in which some gateway was present. A missed heartbeat is evidence about a node
 * only inside that stretch: with every gateway gone, agents had nobody to report to.
 */
import type { Queryable } from '../db/knex.js'
import { toDate } from '../db/dialect.js'

/** A row is pruned once lapsed this long. */
export const PRESENCE_RETENTION_MS = 24 * 3_600_000
/** A gateway counts as present for this many presence intervals after its last write. */
export const PRESENCE_LAPSE_INTERVALS = 2

export async function recordGatewayPresence(db: Queryable, gatewayId: string, startedAt: Date, liveUntil: Date): Promise<void> {
  await db('agent_gateway_presence')
    .insert({ gateway_id: gatewayId, started_at: startedAt, live_until: liveUntil })
    .onConflict('gateway_id')
    .merge(['live_until'])
}

export async function pruneGatewayPresence(db: Queryable, now: Date): Promise<number> {
  return db('agent_gateway_presence').where('live_until', '<', new Date(now.getTime() - PRESENCE_RETENTION_MS)).delete()
}

/**
 * The start of the unbroken stretch ending at `now` in which a gateway was present, looked at no
 * further back than `horizon` (a stretch reaching past it is reported as starting at `horizon`);
 * null when no gateway is present now.
 */
export async function heartbeatsReceivedSince(db: Queryable, now: Date, horizon: Date): Promise<Date | null> {
  const rows = (await db('agent_gateway_presence').where('live_until', '>=', horizon).where('started_at', '<=', now).select('started_at', 'live_until')) as Array<{
    started_at: unknown
    live_until: unknown
  }>
  const spans = rows.map((r) => ({ from: toDate(r.started_at).getTime(), to: toDate(r.live_until).getTime() }))
  let since = now.getTime()
  if (!spans.some((s) => s.from <= since && s.to >= since)) return null
  // Walk back: while some span covers the current start, the stretch reaches back to its start.
  for (let moved = true; moved && since > horizon.getTime(); ) {
    moved = false
    for (const span of spans) {
      if (span.from < since && span.to >= since) {
        since = span.from
        moved = true
      }
    }
  }
  return new Date(Math.max(since, horizon.getTime()))
}
