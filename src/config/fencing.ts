/**
 * The fencing invariant (issue 19; docs/node-agent.md, "Fencing"): a cut-off agent stops its chain
 * AGENT_FENCE_TIMEOUT after its last acknowledged heartbeat, and the health evaluator migrates a
 * node at the earliest HEARTBEAT_TIMEOUT + MIGRATION_GRACE after it. The fence must come first,
 * or every automatic migration would have to wait for it (the migrate workflow never starts the
 * replacement before the fence timeout has passed, whatever these say).
 */
import { ConfigError } from '../errors.js'

export interface FencingSettings {
  AGENT_FENCE_TIMEOUT: number
  HEARTBEAT_TIMEOUT: number
  MIGRATION_GRACE: number
}

export function fencingProblems(s: FencingSettings): string[] {
  const migrateAfter = s.HEARTBEAT_TIMEOUT + s.MIGRATION_GRACE
  if (s.AGENT_FENCE_TIMEOUT < migrateAfter) return []
  return [
    `AGENT_FENCE_TIMEOUT=${s.AGENT_FENCE_TIMEOUT}ms: must be shorter than HEARTBEAT_TIMEOUT + MIGRATION_GRACE (${s.HEARTBEAT_TIMEOUT}ms + ${s.MIGRATION_GRACE}ms = ${migrateAfter}ms), so that a cut-off agent has stopped its chain before its node is migrated`,
  ]
}

/** Throws the configuration error (exit 78) when the invariant does not hold. */
export function assertFencing(s: FencingSettings): void {
  const problems = fencingProblems(s)
  if (problems.length > 0) throw new ConfigError(problems)
}
