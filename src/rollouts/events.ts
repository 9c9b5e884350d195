/**
 * What rollouts publish (spec: "Events"; payloads in docs/rollouts.md), written to the outbox in
 * the caller's transaction so an event commits with the change it reports:
 * - events.rollout.{id}.started | progress | completed
 * - events.node.{id}.upgrade_started | upgrade_completed | upgrade_phase_changed
 * and the rollout-level notifications to the operator who created the rollout.
 */
import { isUuid, uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { enqueueEvent } from '../events/outbox.js'
import { createNotification, type NotificationData, type NotificationKind } from '../notifications/notifications.js'
import type { RolloutStatus } from './states.js'
import type { RolloutRecord } from './store.js'

export interface RolloutProgress {
  rollout_id: string
  chain_profile_id: string
  status: RolloutStatus
  total_nodes: number
  succeeded_nodes: number
  failed_nodes: number
  current_batch: number | null
  batch_count: number | null
  pause_reason: string | null
  awaiting: string | null
}

export function rolloutProgress(r: RolloutRecord): RolloutProgress {
  return {
    rollout_id: r.id,
    chain_profile_id: r.chain_profile_id,
    status: r.status,
    total_nodes: r.total_nodes,
    succeeded_nodes: r.succeeded_nodes,
    failed_nodes: r.failed_nodes,
    current_batch: r.current_batch,
    batch_count: r.batch_count,
    pause_reason: r.pause_reason,
    awaiting: r.awaiting,
  }
}

export type RolloutEventKind = 'started' | 'progress' | 'completed'

export async function publishRolloutEvent(trx: Queryable, kind: RolloutEventKind, progress: RolloutProgress, now: Date): Promise<void> {
  const eventId = uuidv7(now.getTime())
  await enqueueEvent(trx, { subject: `events.rollout.${progress.rollout_id}.${kind}`, payload: { event_id: eventId, ...progress, occurred_at: now.toISOString() }, messageId: eventId }, now)
}

export type NodeUpgradeEventKind = 'upgrade_started' | 'upgrade_completed' | 'upgrade_phase_changed'

export interface NodeUpgradeEvent {
  node_id: string
  rollout_id: string
  /** The rollout node's status after the change. */
  status: string
  upgrade_phase: string | null
  target_version: string
  previous_version: string | null
  attempt: number
  error_message?: string | null
}

export async function publishNodeUpgradeEvent(trx: Queryable, kind: NodeUpgradeEventKind, event: NodeUpgradeEvent, now: Date): Promise<void> {
  const eventId = uuidv7(now.getTime())
  await enqueueEvent(trx, { subject: `events.node.${event.node_id}.${kind}`, payload: { event_id: eventId, ...event, occurred_at: now.toISOString() }, messageId: eventId }, now)
}

const TITLES: Record<string, (p: RolloutProgress) => string> = {
  rollout_started: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id} started: ${p.total_nodes} ${p.total_nodes === 1 ? 'node' : 'nodes'} to upgrade`,
  rollout_completed: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id} completed: ${p.succeeded_nodes} of ${p.total_nodes} nodes upgraded`,
  rollout_paused: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id} paused (${p.pause_reason ?? 'operator'})`,
  rollout_failed: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id} failed: ${p.failed_nodes} of ${p.total_nodes} nodes failed`,
  rollback_initiated: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id}: rolling back ${p.succeeded_nodes} upgraded nodes`,
  rollback_completed: (p) => `Rollout ${p.rollout_id} of ${p.chain_profile_id} rolled back`,
}

/** A rollout notification for its creator, when the creator is a user (an id). */
export async function notifyOperator(trx: Queryable, kind: NotificationKind & keyof typeof TITLES, createdBy: string, progress: RolloutProgress, now: Date, body = ''): Promise<void> {
  if (!isUuid(createdBy)) return
  const user = (await trx('users').where({ id: createdBy }).first('id')) as { id: string } | undefined
  if (!user) return
  const title = (TITLES[kind] as (p: RolloutProgress) => string)(progress)
  const data: NotificationData = {
    rollout_id: progress.rollout_id,
    chain_profile_id: progress.chain_profile_id,
    status: progress.status,
    succeeded_nodes: progress.succeeded_nodes,
    failed_nodes: progress.failed_nodes,
    total_nodes: progress.total_nodes,
    pause_reason: progress.pause_reason,
  }
  await createNotification(trx, { userId: user.id, kind, title, body: body || title, data }, now)
}
