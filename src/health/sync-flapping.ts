/**
 * Rate limit on a node's sync_status changes (docs/health.md, "Sync flapping"). An agent is run
 * on a host the platform does not fully control and may report `syncing`/`synced` back and
 * forth without end: each change was a state-machine write and a health event (40 flaps, 40
 * events, as many incident evaluations and notifications downstream).
 *
 * Per node, at most `maxChanges` changes are admitted per window of `windowMs` (a fixed window
 * starting at the first change, kept in `node_sync_changes`, so reconnecting to another gateway
 * does not reset it). A change beyond that is not written: the node keeps its last admitted
 * sync_status until the window ends, and the first refusal of the window raises one
 * `sync_flapping` incident (repeats in later windows count as occurrences of the same incident
 * while it is unresolved). Runs in the transaction that writes the change.
 */
import type { Knex } from 'knex'
import { lockRow, toBool, toDate } from '../db/dialect.js'
import { findNode } from '../nodes/node-store.js'
import type { SyncStatus } from '../nodes/states.js'
import { DEFAULT_INCIDENT_SETTINGS, incidentTitle, type FlappingRule } from './incident-rules.js'
import { raiseIncident, type RaisedIncident } from './incident-store.js'

export interface SyncChangeLimit {
  maxChanges: number
  windowMs: number
}

/**
 * A node's ordinary life stays well below it: provisioning, a restart, a rollout's stop and start
 * and a migration are two changes each. Six held a healthy node at `syncing` for ten minutes
 * after a canary upgrade on the split stack (AGENT_SYNC_CHANGE_LIMIT, AGENT_SYNC_CHANGE_WINDOW).
 */
export const DEFAULT_SYNC_CHANGE_LIMIT: SyncChangeLimit = { maxChanges: 20, windowMs: 10 * 60_000 }

export type SyncChangeDecision = { admitted: true } | { admitted: false; heldUntil: Date; incident: RaisedIncident | null }

interface Row {
  window_start: unknown
  changes: unknown
  held: unknown
}

/** Counts one sync change of the node at `now`, or refuses it (and raises the flapping incident once per window). */
export async function admitSyncChange(
  trx: Knex.Transaction,
  change: { nodeId: string; from: SyncStatus; to: SyncStatus },
  now: Date,
  limit: SyncChangeLimit = DEFAULT_SYNC_CHANGE_LIMIT,
  flapping: FlappingRule = DEFAULT_INCIDENT_SETTINGS.flapping,
): Promise<SyncChangeDecision> {
  const { nodeId } = change
  const row = (await lockRow(trx, trx('node_sync_changes').where({ node_id: nodeId }).first())) as Row | undefined
  if (!row) {
    await trx('node_sync_changes').insert({ node_id: nodeId, window_start: now, changes: 1, held: false })
    return { admitted: true }
  }
  const windowStart = toDate(row.window_start)
  if (now.getTime() - windowStart.getTime() >= limit.windowMs) {
    await trx('node_sync_changes').where({ node_id: nodeId }).update({ window_start: now, changes: 1, held: false })
    return { admitted: true }
  }
  const changes = Number(row.changes)
  if (changes < limit.maxChanges) {
    await trx('node_sync_changes').where({ node_id: nodeId }).update({ changes: changes + 1 })
    return { admitted: true }
  }
  const heldUntil = new Date(windowStart.getTime() + limit.windowMs)
  if (toBool(row.held)) return { admitted: false, heldUntil, incident: null }
  await trx('node_sync_changes').where({ node_id: nodeId }).update({ held: true })
  const node = await findNode(trx, nodeId)
  if (!node) return { admitted: false, heldUntil, incident: null }
  const incident = await raiseIncident(
    trx,
    {
      nodeId,
      subscriptionId: node.subscription_id,
      chainProfileId: node.chain_profile_id,
      category: 'sync_flapping',
      occurredAt: now,
      title: incidentTitle('sync_flapping', node.chain_profile_id, nodeId),
      description:
        `The agent changed the node's sync status more than ${limit.maxChanges} times within ${Math.round(limit.windowMs / 60_000)} minutes ` +
        `(last ${change.from} -> ${change.to}). Further changes are not recorded until ${heldUntil.toISOString()}; the node keeps sync status ${change.from}.`,
      metadata: { changes_in_window: changes, window_start: windowStart.toISOString(), held_until: heldUntil.toISOString(), last_from: change.from, last_to: change.to },
    },
    flapping,
    now,
  )
  return { admitted: false, heldUntil, incident }
}
