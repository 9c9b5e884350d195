/**
 * Agent commands (spec: "Agent commands run asynchronously"). The orchestrator enqueues a row;
 * whichever gateway holds the node's stream delivers it (pending -> sent); the agent's reports
 * move it to running and then completed or failed. Reports are keyed by command id *and* node id,
 * so an agent can only report on its own node's commands, and a finished command never changes.
 */
import type { Queryable } from '../db/knex.js'
import { fromJson, toBool, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { ORCHESTRATOR_STALL_LIMIT, commandPayloads, isCommandType, type CommandType } from './protocol.js'

export const COMMAND_STATUSES = ['pending', 'sent', 'running', 'completed', 'failed', 'cancelled'] as const
export type CommandStatus = (typeof COMMAND_STATUSES)[number]
export const UNFINISHED_STATUSES: readonly CommandStatus[] = ['pending', 'sent', 'running']
const MAX_ERROR_LENGTH = 2_000
const MAX_RESULT_BYTES = 1_000_000

export interface AgentCommand {
  id: string
  node_id: string
  type: CommandType
  payload: unknown
  status: CommandStatus
  idempotency_key: string | null
  gateway_id: string | null
  progress_phase: string | null
  progress_message: string | null
  stall_count: number
  stalled: boolean
  sent_at: Date | null
  acknowledged_at: Date | null
  last_progress_at: Date | null
  finished_at: Date | null
  result: unknown
  error: string | null
  created_at: Date
  updated_at: Date
}

export function commandFromRow(row: Record<string, unknown>): AgentCommand {
  return {
    id: String(row.id),
    node_id: String(row.node_id),
    type: row.type as CommandType,
    payload: fromJson(row.payload),
    status: row.status as CommandStatus,
    idempotency_key: (row.idempotency_key as string | null) ?? null,
    gateway_id: (row.gateway_id as string | null) ?? null,
    progress_phase: (row.progress_phase as string | null) ?? null,
    progress_message: (row.progress_message as string | null) ?? null,
    stall_count: Number(row.stall_count ?? 0),
    stalled: toBool(row.stalled),
    sent_at: toDateOrNull(row.sent_at),
    acknowledged_at: toDateOrNull(row.acknowledged_at),
    last_progress_at: toDateOrNull(row.last_progress_at),
    finished_at: toDateOrNull(row.finished_at),
    result: row.result === null || row.result === undefined ? null : fromJson(row.result),
    error: (row.error as string | null) ?? null,
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

export function isFinished(status: CommandStatus): boolean {
  return !UNFINISHED_STATUSES.includes(status)
}

export interface NewCommand {
  nodeId: string
  type: CommandType
  payload: unknown
  /** A retried workflow step passes the same key and gets the command it already enqueued. */
  idempotencyKey?: string
}

export async function enqueueCommand(db: Queryable, input: NewCommand, now: Date = new Date()): Promise<AgentCommand> {
  if (!isCommandType(input.type)) throw new ValidationError(`unknown agent command type "${String(input.type).slice(0, 40)}"`)
  const parsed = commandPayloads[input.type].safeParse(input.payload)
  if (!parsed.success) {
    throw new ValidationError(`invalid ${input.type} command payload`, parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '))
  }
  if (input.idempotencyKey) {
    const existing = await findByKey(db, input.idempotencyKey)
    if (existing) return sameCommandOrConflict(existing, input)
  }
  const row = {
    id: uuidv7(now.getTime()),
    node_id: input.nodeId,
    type: input.type,
    payload: toJson(parsed.data),
    status: 'pending',
    idempotency_key: input.idempotencyKey ?? null,
    stall_count: 0,
    stalled: false,
    created_at: now,
    updated_at: now,
  }
  try {
    await db('agent_commands').insert(row)
  } catch (err) {
    if (input.idempotencyKey && isUniqueViolation(err)) {
      const existing = await findByKey(db, input.idempotencyKey)
      if (existing) return sameCommandOrConflict(existing, input)
    }
    throw err
  }
  return commandFromRow(row)
}

async function findByKey(db: Queryable, key: string): Promise<AgentCommand | undefined> {
  const row = (await db('agent_commands').where({ idempotency_key: key }).first()) as Record<string, unknown> | undefined
  return row ? commandFromRow(row) : undefined
}

function sameCommandOrConflict(existing: AgentCommand, input: NewCommand): AgentCommand {
  if (existing.node_id !== input.nodeId || existing.type !== input.type) {
    throw new ConflictError(`idempotency key already used for a ${existing.type} command on node ${existing.node_id}`)
  }
  return existing
}

export async function getCommand(db: Queryable, id: string): Promise<AgentCommand> {
  const row = (await db('agent_commands').where({ id }).first()) as Record<string, unknown> | undefined
  if (!row) throw new NotFoundError(`agent command ${id} not found`)
  return commandFromRow(row)
}

/** What a gateway (re)sends when an agent's stream opens, oldest first. */
export async function listUnfinishedCommands(db: Queryable, nodeId: string): Promise<AgentCommand[]> {
  const rows = (await db('agent_commands')
    .where({ node_id: nodeId })
    .whereIn('status', UNFINISHED_STATUSES)
    .orderBy('created_at')
    .orderBy('id')) as Record<string, unknown>[]
  return rows.map(commandFromRow)
}

/** listUnfinishedCommands for many nodes at once (streams opening together): one read per 500 nodes. */
export async function listUnfinishedCommandsOf(db: Queryable, nodeIds: readonly string[]): Promise<Map<string, AgentCommand[]>> {
  const byNode = new Map<string, AgentCommand[]>()
  for (let i = 0; i < nodeIds.length; i += 500) {
    const rows = (await db('agent_commands')
      .whereIn('node_id', nodeIds.slice(i, i + 500))
      .whereIn('status', UNFINISHED_STATUSES)
      .orderBy('created_at')
      .orderBy('id')) as Record<string, unknown>[]
    for (const row of rows) {
      const command = commandFromRow(row)
      const list = byNode.get(command.node_id)
      if (list) list.push(command)
      else byNode.set(command.node_id, [command])
    }
  }
  return byNode
}

export interface PendingCommandRef {
  id: string
  node_id: string
}

/** Unsent commands, oldest first: a gateway filters them by the nodes it holds streams for. */
export async function findPendingCommands(db: Queryable, options: { createdSince?: Date; limit: number }): Promise<PendingCommandRef[]> {
  const query = db('agent_commands').where({ status: 'pending' }).orderBy('created_at').limit(options.limit).select('id', 'node_id')
  if (options.createdSince) query.andWhere('created_at', '>=', options.createdSince)
  const rows = (await query) as { id: string; node_id: string }[]
  return rows.map((r) => ({ id: String(r.id), node_id: String(r.node_id) }))
}

/**
 * Moves commands from pending to sent for this gateway; returns the ones it won. Two gateways
 * holding a stream for the same node (a stale one and a new one) cannot both deliver a command.
 */
export async function claimForDelivery(db: Queryable, ids: readonly string[], gatewayId: string, now: Date = new Date()): Promise<AgentCommand[]> {
  if (ids.length === 0) return []
  const rows = (await db('agent_commands')
    .whereIn('id', ids)
    .andWhere({ status: 'pending' })
    .update({ status: 'sent', gateway_id: gatewayId, sent_at: now, updated_at: now })
    .returning('*')) as Record<string, unknown>[]
  return rows.map(commandFromRow)
}

/** A command already sent (or running) that is sent again on reconnect records the new gateway. */
export async function markResent(db: Queryable, ids: readonly string[], gatewayId: string, now: Date = new Date()): Promise<void> {
  if (ids.length === 0) return
  await db('agent_commands').whereIn('id', ids).whereIn('status', ['pending', 'sent']).update({ status: 'sent', gateway_id: gatewayId, sent_at: now, updated_at: now })
}

type Report = { id: string; nodeId: string }

export async function recordAck(db: Queryable, report: Report, now: Date = new Date()): Promise<boolean> {
  const n = await db('agent_commands')
    .where({ id: report.id, node_id: report.nodeId })
    .whereIn('status', ['pending', 'sent'])
    .update({ status: 'running', acknowledged_at: now, last_progress_at: now, updated_at: now })
  return n > 0
}

export interface ProgressReport extends Report {
  phase: string
  message: string
  stallCount: number
  stalled: boolean
}

export async function recordProgress(db: Queryable, report: ProgressReport, now: Date = new Date()): Promise<boolean> {
  const n = await db('agent_commands')
    .where({ id: report.id, node_id: report.nodeId })
    .whereIn('status', UNFINISHED_STATUSES)
    .update({
      status: 'running',
      progress_phase: report.phase.slice(0, 64) || null,
      progress_message: report.message.slice(0, 500) || null,
      stall_count: Math.max(0, Math.trunc(report.stallCount)),
      stalled: report.stalled,
      last_progress_at: now,
      updated_at: now,
    })
  return n > 0
}

export async function recordCompletion(db: Queryable, report: Report & { result: unknown }, now: Date = new Date()): Promise<boolean> {
  return finish(db, report, { status: 'completed', result: boundedJson(report.result), error: null }, now)
}

export async function recordFailure(db: Queryable, report: Report & { error: string; result?: unknown }, now: Date = new Date()): Promise<boolean> {
  return finish(db, report, { status: 'failed', result: report.result === undefined ? null : boundedJson(report.result), error: report.error.slice(0, MAX_ERROR_LENGTH) }, now)
}

export async function cancelCommand(db: Queryable, id: string, reason: string, now: Date = new Date()): Promise<boolean> {
  const n = await db('agent_commands')
    .where({ id })
    .whereIn('status', UNFINISHED_STATUSES)
    .update({ status: 'cancelled', error: reason.slice(0, MAX_ERROR_LENGTH), finished_at: now, updated_at: now })
  return n > 0
}

async function finish(db: Queryable, report: Report, values: { status: CommandStatus; result: string | null; error: string | null }, now: Date): Promise<boolean> {
  const n = await db('agent_commands')
    .where({ id: report.id, node_id: report.nodeId })
    .whereIn('status', UNFINISHED_STATUSES)
    .update({ ...values, finished_at: now, updated_at: now })
  return n > 0
}

function boundedJson(value: unknown): string {
  const json = toJson(value ?? null)
  if (Buffer.byteLength(json) > MAX_RESULT_BYTES) return toJson({ truncated: true, bytes: Buffer.byteLength(json) })
  return json
}

/**
 * The orchestrator's view of a command. Spec: the orchestrator fails a command at 20 stall
 * counts; that happens here, so every waiter applies the same rule.
 */
export async function checkCommand(db: Queryable, id: string, now: Date = new Date()): Promise<AgentCommand> {
  const command = await getCommand(db, id)
  if (!isFinished(command.status) && command.stall_count >= ORCHESTRATOR_STALL_LIMIT) {
    await recordFailure(
      db,
      { id, nodeId: command.node_id, error: `stalled: no progress for ${command.stall_count} checks (limit ${ORCHESTRATOR_STALL_LIMIT})` },
      now,
    )
    return getCommand(db, id)
  }
  return command
}

export interface AwaitOptions {
  timeoutMs: number
  pollIntervalMs?: number
  signal?: AbortSignal
  now?: () => Date
}

/** Polls until the command finishes or `timeoutMs` passes; returns the last state either way. */
export async function awaitCommand(db: Queryable, id: string, options: AwaitOptions): Promise<AgentCommand> {
  const now = options.now ?? (() => new Date())
  const deadline = now().getTime() + options.timeoutMs
  const poll = options.pollIntervalMs ?? 250
  for (;;) {
    const command = await checkCommand(db, id, now())
    if (isFinished(command.status) || now().getTime() >= deadline || options.signal?.aborted) return command
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, poll)
      options.signal?.addEventListener('abort', () => {
        clearTimeout(timer)
        resolve()
      }, { once: true })
    })
  }
}
