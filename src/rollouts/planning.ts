/**
 * Planning a rollout (spec: "Rollout execution rules"): the eligible nodes, and their batches.
 *
 * Eligible: the rollout's chain profile and node type, running the source version
 * (`node_config_state.binary_version`), in a state an upgrade may start from (healthy or
 * degraded: the only states with a move to `maintenance` that are not already in trouble —
 * `down` nodes are the migration trigger's), and belonging to an `active` subscription.
 *
 * Batches: `rolling` — batch_size at a time; `canary` — canary_size nodes drawn at random form
 * batch 0, the rest follow batch_size at a time; `all_at_once` — one batch. The draw is seeded by
 * the rollout id, so planning the same rollout twice gives the same batches.
 */
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import type { RolloutStrategy } from './states.js'

export const UPGRADEABLE_STATES = ['healthy', 'degraded'] as const

export interface BatchPlan {
  /** Node ids per batch, in order. */
  batches: string[][]
  /** How many of the first batch are the canary (0 unless the strategy is canary). */
  canaryCount: number
}

export function assignBatches(nodeIds: readonly string[], options: { strategy: RolloutStrategy; batchSize: number; canarySize: number | null; seed: string }): BatchPlan {
  const ordered = [...nodeIds].sort()
  if (ordered.length === 0) return { batches: [], canaryCount: 0 }
  if (options.strategy === 'all_at_once') return { batches: [ordered], canaryCount: 0 }
  const chunks = (ids: string[]) => {
    const out: string[][] = []
    for (let i = 0; i < ids.length; i += options.batchSize) out.push(ids.slice(i, i + options.batchSize))
    return out
  }
  if (options.strategy === 'rolling') return { batches: chunks(ordered), canaryCount: 0 }
  const canarySize = Math.min(Math.max(1, options.canarySize ?? 1), ordered.length)
  const drawn = seededShuffle(ordered, options.seed)
  const canary = drawn.slice(0, canarySize).sort()
  const rest = ordered.filter((id) => !canary.includes(id))
  return { batches: [canary, ...chunks(rest)], canaryCount: canary.length }
}

/** Fisher-Yates with a SHA-256 counter stream: random-looking, the same for the same seed. */
function seededShuffle(ids: readonly string[], seed: string): string[] {
  const out = [...ids]
  let counter = 0
  const next = (bound: number) => {
    const digest = crypto.createHash('sha256').update(`${seed}:${counter++}`).digest()
    return digest.readUInt32BE(0) % bound
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = next(i + 1)
    ;[out[i], out[j]] = [out[j] as string, out[i] as string]
  }
  return out
}

export interface EligibilityCriteria {
  chainProfileId: string
  nodeType: string
  sourceVersion: string
}

/** Ids of the nodes a rollout with these criteria may upgrade now. */
export async function eligibleNodeIds(db: Queryable, criteria: EligibilityCriteria): Promise<string[]> {
  return (await db('nodes')
    .join('node_config_state', 'node_config_state.node_id', 'nodes.id')
    .join('subscriptions', 'subscriptions.id', 'nodes.subscription_id')
    .where('nodes.chain_profile_id', criteria.chainProfileId)
    .where('nodes.node_type', criteria.nodeType)
    .whereIn('nodes.state', UPGRADEABLE_STATES)
    .where('node_config_state.binary_version', criteria.sourceVersion)
    .where('subscriptions.status', 'active')
    .orderBy('nodes.id')
    .pluck('nodes.id')) as string[]
}
