/**
 * How a workflow step talks to a node's agent: enqueue a command (idempotent by key, so a
 * retried step gets the command it already sent) and wait for its outcome.
 */
import { awaitCommand, cancelCommand, enqueueCommand } from '../agent-gateway/commands.js'
import type { CommandType } from '../agent-gateway/protocol.js'
import { findRegistration, registeredSince, type AgentRegistration } from '../agent-gateway/registrations.js'
import { NonRetryableStepError, type StepOptions } from '../workflows/index.js'
import type { LifecycleDeps } from './deps.js'

/**
 * Waiting for a node's agent to register (spec: Limits, "agent wait 5 min, 20 attempts"). The
 * attempts are for what interrupts a wait (an orchestrator killed during it, a database error);
 * the wait's deadline is fixed from the host's bootstrap (AGENT_READY_WAIT), so once it has
 * passed the step fails at once instead of retrying.
 */
export const AGENT_WAIT_STEP: StepOptions = { preset: 'agentWait' }

/**
 * A command to the agent and its outcome: the spec's default class (3 attempts; a retry sends a
 * fresh command). Each attempt lasts one AGENT_COMMAND_TIMEOUT (the default class's 10 minutes by
 * default) plus a minute, so the command's own deadline, which cancels it, comes first.
 */
export function agentCommandStep(commandTimeoutMs: number): StepOptions {
  return { preset: 'default', timeoutMs: commandTimeoutMs + 60_000 }
}

export class AgentCommandError extends Error {
  constructor(
    message: string,
    readonly result: unknown,
  ) {
    super(message)
    this.name = 'AgentCommandError'
  }
}

export interface AgentCommandOptions {
  /**
   * Give up (cancelling the command) once the node's agent is seen disconnected, instead of
   * waiting for it to come back: for best-effort commands to a host that may be dying.
   */
  abandonOnDisconnect?: boolean
}

/** How often a command with `abandonOnDisconnect` looks at the agent's connection. */
const DISCONNECT_CHECK_MS = 1_000

export async function runAgentCommand(
  deps: LifecycleDeps,
  command: { nodeId: string; type: CommandType; payload: unknown; key: string },
  heartbeat?: () => void,
  options: AgentCommandOptions = {},
): Promise<unknown> {
  const now = deps.now ?? (() => new Date())
  const enqueued = await enqueueCommand(deps.db, { nodeId: command.nodeId, type: command.type, payload: command.payload, idempotencyKey: await attemptKey(deps, command.key) }, now())
  const deadline = now().getTime() + deps.commandTimeoutMs
  const slice = options.abandonOnDisconnect ? DISCONNECT_CHECK_MS : 10_000
  for (;;) {
    heartbeat?.()
    const outcome = await awaitCommand(deps.db, enqueued.id, { timeoutMs: Math.min(slice, Math.max(0, deadline - now().getTime())), pollIntervalMs: deps.pollIntervalMs, now })
    if (outcome.status === 'completed') return outcome.result
    if (outcome.status === 'failed' || outcome.status === 'cancelled') {
      throw new AgentCommandError(`${command.type} on node ${command.nodeId} ${outcome.status}: ${outcome.error ?? 'no reason given'}`, outcome.result)
    }
    if (options.abandonOnDisconnect && (await findRegistration(deps.db, command.nodeId))?.disconnected_at) {
      await cancelCommand(deps.db, enqueued.id, 'the agent disconnected', now())
      throw new AgentCommandError(`${command.type} on node ${command.nodeId}: the agent disconnected before it answered`, null)
    }
    if (now().getTime() >= deadline) {
      await cancelCommand(deps.db, enqueued.id, `no outcome within ${Math.round(deps.commandTimeoutMs / 1000)} s`, now())
      throw new AgentCommandError(`${command.type} on node ${command.nodeId}: no outcome within ${Math.round(deps.commandTimeoutMs / 1000)} s`, null)
    }
  }
}

/**
 * A step resumed after a crash finds the command it already sent (running or done) instead of
 * sending a second one; a step retried after a failed command sends a fresh one (`key#2`, …).
 */
async function attemptKey(deps: LifecycleDeps, base: string): Promise<string> {
  const previous = (await deps.db('agent_commands')
    .where('idempotency_key', base)
    .orWhere('idempotency_key', 'like', `${base}#%`)
    .select('idempotency_key', 'status')) as { idempotency_key: string; status: string }[]
  // LIKE's `_` matches any character: keep only the keys that really are `base` or `base#n`.
  const ours = previous.filter((p) => p.idempotency_key === base || (p.idempotency_key.startsWith(base) && /^#\d+$/.test(p.idempotency_key.slice(base.length))))
  if (ours.length === 0) return base
  const latest = ours.reduce((a, b) => (sequence(b.idempotency_key) > sequence(a.idempotency_key) ? b : a))
  if (latest.status !== 'failed' && latest.status !== 'cancelled') return latest.idempotency_key
  return `${base}#${sequence(latest.idempotency_key) + 1}`
}

function sequence(key: string): number {
  const match = /#(\d+)$/.exec(key)
  return match ? Number(match[1]) : 1
}

/** Waits for an agent that registered at or after `since`. */
export async function waitForAgent(deps: LifecycleDeps, nodeId: string, since: Date, heartbeat?: () => void): Promise<AgentRegistration> {
  const now = deps.now ?? (() => new Date())
  const deadline = since.getTime() + deps.agentReadyWaitMs
  for (;;) {
    heartbeat?.()
    const registration = await registeredSince(deps.db, nodeId, since)
    if (registration) return registration
    if (now().getTime() >= deadline) throw new NonRetryableStepError(`the agent of node ${nodeId} did not register within ${Math.round(deps.agentReadyWaitMs / 1000)} s`)
    await new Promise((resolve) => setTimeout(resolve, deps.pollIntervalMs))
  }
}
