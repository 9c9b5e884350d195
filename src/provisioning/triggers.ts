/**
 * Starting the node lifecycle workflows: what payment activation, the health evaluator,
 * subscription expiry and operators call. Idempotent: the workflow key is the node id, so a
 * second request returns the run already started (`created: false`).
 */
import type { Queryable } from '../db/knex.js'
import { NotFoundError, ValidationError } from '../errors.js'
import { findNode } from '../nodes/node-store.js'
import { startWorkflow, type StartResult } from '../workflows/index.js'
import { PROVISION_WORKFLOW } from './provision.js'
import { TERMINATE_WORKFLOW } from './terminate.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

async function existingNode(db: Queryable, nodeId: string) {
  if (!UUID.test(nodeId)) throw new ValidationError(`"${nodeId.slice(0, 60)}" is not a node id (UUID)`)
  const node = await findNode(db, nodeId.toLowerCase())
  if (!node) throw new NotFoundError(`node ${nodeId} not found`)
  return node
}

export async function requestProvision(db: Queryable, nodeId: string, now: Date = new Date()): Promise<StartResult> {
  const node = await existingNode(db, nodeId)
  return startWorkflow(db, PROVISION_WORKFLOW, { nodeId: node.id }, { key: node.id, now })
}

export async function requestTermination(db: Queryable, nodeId: string, reason: string, now: Date = new Date()): Promise<StartResult> {
  const node = await existingNode(db, nodeId)
  return startWorkflow(db, TERMINATE_WORKFLOW, { nodeId: node.id, reason }, { key: node.id, now })
}
