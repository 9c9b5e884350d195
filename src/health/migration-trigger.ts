/**
 * The migration trigger (spec: "a node that stays down is migrated"; Limits: migration grace 60 s,
 * cooldown 1 hour; docs/health.md): nodes `down` for longer than the grace whose last migration
 * was triggered before the cooldown get a migrate workflow through `requestMigration`, which
 * re-checks state and cooldown under a row lock and returns the running attempt instead of
 * starting a second one. At most `maxPerCycle` start per cycle, oldest outage first: a fleet-wide
 * outage (the agent-gateway down, a network partition) must not turn into a fleet-wide migration
 * in one cycle.
 */
import type { Db } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import type { Logger } from '../log.js'
import { requestMigration } from '../provisioning/triggers.js'

/** Spec: wait after DOWN before migrating. */
export const MIGRATION_GRACE_MS = 60_000

export interface MigrationTriggerOptions {
  now: Date
  graceMs: number
  cooldownMs: number
  maxPerCycle: number
  logger: Logger
}

export interface MigrationTriggerResult {
  /** Migrate runs started in this cycle. */
  started: Array<{ node_id: string; run_id: string }>
  /** Eligible nodes left for later cycles by `maxPerCycle`. */
  deferred: number
}

export async function triggerMigrations(db: Db, options: MigrationTriggerOptions): Promise<MigrationTriggerResult> {
  const { now } = options
  const eligible = (await db('nodes')
    .where('state', 'down')
    .where('state_changed_at', '<=', new Date(now.getTime() - options.graceMs))
    .where((q) => q.whereNull('last_migration_triggered_at').orWhere('last_migration_triggered_at', '<=', new Date(now.getTime() - options.cooldownMs)))
    .orderBy([{ column: 'state_changed_at' }, { column: 'id' }])
    .limit(options.maxPerCycle + 1)
    .pluck('id')) as string[]

  const result: MigrationTriggerResult = { started: [], deferred: Math.max(0, eligible.length - options.maxPerCycle) }
  for (const nodeId of eligible.slice(0, options.maxPerCycle)) {
    try {
      const { run, created } = await requestMigration(db, nodeId, {
        reason: `down for more than ${Math.round(options.graceMs / 1000)} s`,
        now,
        cooldownMs: options.cooldownMs,
        // A heartbeat may bring the node back before the run's first step: then it is not moved.
        onlyIfDown: true,
      })
      if (created) {
        result.started.push({ node_id: nodeId, run_id: run.id })
        options.logger.info({ nodeId, workflowId: run.id }, 'node down past its grace: migration started')
      }
    } catch (err) {
      // Moved on (healthy again, terminating) or another evaluator got there first.
      if (!(err instanceof ConflictError)) throw err
      options.logger.debug({ nodeId, err: err.message }, 'migration not started')
    }
  }
  if (result.deferred > 0) options.logger.warn({ deferred: result.deferred, max_per_cycle: options.maxPerCycle }, 'more nodes down than migrations allowed per cycle')
  return result
}
