/**
 * For the rollouts issue: spec "A compensation failure gives upgrade_phase `failed_rollback`,
 * node state `degraded` and a critical incident". The spec's category enum has no upgrade
 * category; such a node had its software moved and could not be moved back, which is what
 * `migration_failed` means for hosts: critical, never auto-resolved (the node may report healthy
 * on a half-installed binary), deduplicated with any other open migration failure of the node.
 * `metadata.trigger = 'upgrade_failed_rollback'` tells the two apart (docs/incidents.md).
 */
import type { Knex } from 'knex'
import { NotFoundError } from '../errors.js'
import { findNode } from '../nodes/node-store.js'
import { raiseIncident, type RaisedIncident } from './incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS, type FlappingRule } from './incident-rules.js'

export interface UpgradeFailure {
  nodeId: string
  rolloutId: string
  /** The version the node was being moved to, and from. */
  targetVersion?: string
  sourceVersion?: string
  /** What failed in the compensation, for the person who picks it up. */
  reason: string
  now: Date
  flapping?: FlappingRule
}

/** Raises (or repeats) the node's critical incident in the caller's transaction. */
export async function raiseUpgradeFailureIncident(trx: Knex.Transaction, failure: UpgradeFailure): Promise<RaisedIncident> {
  const node = await findNode(trx, failure.nodeId)
  if (!node) throw new NotFoundError(`node ${failure.nodeId} not found`)
  const versions = failure.sourceVersion && failure.targetVersion ? ` from ${failure.sourceVersion} to ${failure.targetVersion}` : ''
  return raiseIncident(
    trx,
    {
      nodeId: node.id,
      subscriptionId: node.subscription_id,
      chainProfileId: node.chain_profile_id,
      category: 'migration_failed',
      severity: 'critical',
      occurredAt: failure.now,
      title: `${node.chain_profile_id} node ${node.id.slice(0, 8)}: upgrade failed and could not be rolled back`,
      description: `Node ${node.id}: the upgrade${versions} in rollout ${failure.rolloutId} failed and undoing it failed too (${failure.reason}). The node needs manual intervention.`,
      metadata: {
        trigger: 'upgrade_failed_rollback',
        rollout_id: failure.rolloutId,
        upgrade_phase: 'failed_rollback',
        source_version: failure.sourceVersion ?? null,
        target_version: failure.targetVersion ?? null,
        reason: failure.reason,
      },
    },
    failure.flapping ?? DEFAULT_INCIDENT_SETTINGS.flapping,
    failure.now,
  )
}
