/**
 * The health evaluator's periodic summary line (issue 22, item 5): the lease holder logs one
 * line at its first cycle and then about once per `everyMs` of its clock, even when nothing
 * changed, so an operator reading the log sees that evaluation runs, where, and over how many
 * nodes. Per-cycle lines stay at debug unless something moved.
 */
import type { Logger } from '../log.js'

export interface CycleCounts {
  /** Nodes whose application health was evaluated (every node with a state to judge). */
  nodes_evaluated: number
  /** State moves (heartbeat evaluation) and application-health changes (policy evaluation). */
  transitions: number
  /** Writes refused because another writer changed the node first (retried next cycle). */
  conflicts: number
  /** Missed heartbeats counted. */
  timeouts_counted: number
  migrations_started: number
}

export interface EvaluationSummary {
  add(counts: CycleCounts, now: Date): void
}

export const DEFAULT_SUMMARY_EVERY_MS = 60_000

export function createEvaluationSummary(logger: Logger, everyMs: number = DEFAULT_SUMMARY_EVERY_MS): EvaluationSummary {
  let since: Date | undefined
  let cycles = 0
  let totals = { transitions: 0, conflicts: 0, timeouts_counted: 0, migrations_started: 0 }

  return {
    add(counts, now) {
      cycles += 1
      totals = {
        transitions: totals.transitions + counts.transitions,
        conflicts: totals.conflicts + counts.conflicts,
        timeouts_counted: totals.timeouts_counted + counts.timeouts_counted,
        migrations_started: totals.migrations_started + counts.migrations_started,
      }
      if (since !== undefined && now.getTime() - since.getTime() < everyMs) return
      logger.info({ cycles, nodes_evaluated: counts.nodes_evaluated, ...totals, since: (since ?? now).toISOString() }, 'health evaluation summary')
      since = now
      cycles = 0
      totals = { transitions: 0, conflicts: 0, timeouts_counted: 0, migrations_started: 0 }
    },
  }
}
