/**
 * Starting the node lifecycle workflows: what payment activation, the health evaluator,
 * subscription expiry and operators call. Idempotent: the workflow key is the node id, so a
 * second request returns the run already started (`created: false`).
 */
import { isUuid } from '../db/ids.js'
import { lockRow } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { findNode } from '../nodes/node-store.js'
import type { NodeState } from '../nodes/states.js'
import { findRunByKey, startWorkflow, type StartResult } from '../workflows/index.js'
import type { MigrateInput } from './migrate.js'
import { MIGRATABLE_STATES, MIGRATE_WORKFLOW, MIGRATION_COOLDOWN_MS, migrationKey, PROVISION_WORKFLOW, TERMINATE_WORKFLOW } from './workflow-names.js'


async function existingNode(db: Queryable, nodeId: string) {
  if (!isUuid(nodeId)) throw new ValidationError(`"${nodeId.slice(0, 60)}" is not a node id (UUID)`)
  const node = await findNode(db, nodeId.toLowerCase())
  if (!node) throw new NotFoundError(`node ${nodeId} not found`)
  return node
}

export async function requestProvision(db: Queryable, nodeId: string, now: Date = new Date()): Promise<StartResult> {
  const node = await existingNode(db, nodeId)
  return startProvision(db, node.id, now)
}

/** For a caller that has just inserted the node in this transaction: it is not read again. */
export function startProvision(db: Queryable, nodeId: string, now: Date): Promise<StartResult> {
  return startWorkflow(db, PROVISION_WORKFLOW, { nodeId }, { key: nodeId, now })
}

export async function requestTermination(db: Queryable, nodeId: string, reason: string, now: Date = new Date()): Promise<StartResult> {
  const node = await existingNode(db, nodeId)
  return startWorkflow(db, TERMINATE_WORKFLOW, { nodeId: node.id, reason }, { key: node.id, now })
}

export interface MigrationRequest {
  /** Why: recorded in the run's input and the node's health events. */
  reason: string
  now?: Date
  /** Operators: ignore the cooldown (never the state rules). */
  force?: boolean
  /** Spec: 1 hour between attempts (`MIGRATION_COOLDOWN`). */
  cooldownMs?: number
  /** The health evaluator's trigger: the run migrates only if the node is still down when it starts. */
  onlyIfDown?: boolean
}

const NOT_MIGRATABLE: Partial<Record<NodeState, string>> = {
  provisioning: 'it has not finished provisioning (a failed provisioning ends failed; it is not migrated)',
  syncing: 'a syncing node cannot enter maintenance (spec transition table); it can once it is healthy, degraded or down',
  maintenance: 'another workflow (an upgrade or a migration) holds its maintenance window',
  terminating: 'it is being terminated',
  terminated: 'it is terminated',
  failed: 'failed is final',
}

/**
 * Starts a migration attempt (the health evaluator 60 s after `down`, operators any time). While
 * the node's latest attempt is still running, that run is returned (`created: false`), forced or
 * not. Otherwise a new attempt needs the node in healthy, degraded or down and, unless forced,
 * the cooldown since `last_migration_triggered_at` to have passed; it sets that column and
 * starts the run in one transaction (its time is the run's key).
 */
export async function requestMigration(db: Queryable, nodeId: string, request: MigrationRequest): Promise<StartResult> {
  const found = await existingNode(db, nodeId)
  const now = request.now ?? new Date()
  const cooldownMs = request.cooldownMs ?? MIGRATION_COOLDOWN_MS
  return db.transaction(async (trx) => {
    await lockRow(trx, trx('nodes').where({ id: found.id }).first('id'))
    const node = await findNode(trx, found.id)
    if (!node) throw new NotFoundError(`node ${nodeId} not found`)
    const last = node.last_migration_triggered_at
    if (last) {
      const current = await findRunByKey(trx, MIGRATE_WORKFLOW, migrationKey(node.id, last))
      if (current && current.status !== 'completed' && current.status !== 'failed') return { run: current, created: false }
    }
    if (!MIGRATABLE_STATES.includes(node.state)) {
      throw new ConflictError(`node ${node.id} is ${node.state} and cannot be migrated`, NOT_MIGRATABLE[node.state] ?? `a migration starts from ${MIGRATABLE_STATES.join(', ')}`)
    }
    if (last && !request.force && now.getTime() < last.getTime() + cooldownMs) {
      const endsAt = new Date(last.getTime() + cooldownMs).toISOString()
      throw new ConflictError(
        `node ${node.id} is in its migration cooldown until ${endsAt}`,
        `the last migration was triggered at ${last.toISOString()}; wait until the cooldown ends, or force it (operators: --force)`,
      )
    }
    await trx('nodes').where({ id: node.id }).update({ last_migration_triggered_at: now })
    const input: MigrateInput = { nodeId: node.id, reason: request.reason, triggeredAt: now.toISOString(), forced: request.force ?? false }
    if (request.onlyIfDown) Object.assign(input, { onlyIfDown: true, previousTriggeredAt: last?.toISOString() ?? null })
    return startWorkflow(trx, MIGRATE_WORKFLOW, input, { key: migrationKey(node.id, now), now })
  })
}
