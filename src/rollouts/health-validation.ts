/**
 * Health validation of an upgraded node (spec: "Health validation passes only when all hold"),
 * observed for the whole health_wait_duration after the upgrade command completed:
 * - at least one heartbeat arrives after the upgrade;
 * - application_health is not critical once the node has come up (HealthJudge) — judged here
 *   from the agent's reports with the chain's policy, since the policy evaluation skips nodes in
 *   maintenance (without block_lag, whatever the policy's block_lag_reference: `fleet` needs the
 *   fleet's head, and under `node` a node just restarted on a new binary catching up to its own
 *   reported head is not unhealthy);
 * - sync_status is not stalled;
 * - the node's state is not down or failed;
 * - no crash loop within the window: the agent reporting `crash_loop`, or the chain process
 *   restarted by the supervisor at all (a freshly installed binary that crashes once while
 *   being watched is not healthy).
 * The first condition broken ends the validation at once. Only reports of the version installed
 * count: a heartbeat the agent took before the upgrade (of the old process, healthy) can reach the
 * control plane after the upgrade completed, and its receive time is no proof of the new binary.
 */
import type { HealthPolicy } from '../config/health-policy.js'
import { fromJson, toDateOrNull } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { applicationHealthFor } from '../health/policy-evaluation.js'

export interface HealthValidationOptions {
  nodeId: string
  /** When the upgrade command completed: only heartbeats after it count. */
  since: Date
  /** The version installed: only reports of it count. */
  version: string
  durationMs: number
  policy: HealthPolicy
  pollIntervalMs: number
  now: () => Date
  heartbeat?: () => void
}

export type HealthValidation = { ok: true } | { ok: false; reason: string }

export interface Observation {
  state: string
  reported_at: Date | null
  binary_version: string | null
  sync_status: string | null
  process_state: string | null
  restarts_in_window: number | null
  metrics: Record<string, number>
}

async function observe(db: Queryable, nodeId: string): Promise<Observation | undefined> {
  const row = (await db('nodes')
    .leftJoin('agent_status', 'agent_status.node_id', 'nodes.id')
    .where('nodes.id', nodeId)
    .first('nodes.state', 'agent_status.reported_at', 'agent_status.binary_version', 'agent_status.sync_status', 'agent_status.process_state', 'agent_status.restarts_in_window', 'agent_status.metrics')) as
    | Record<string, unknown>
    | undefined
  if (!row) return undefined
  return {
    state: String(row.state),
    reported_at: toDateOrNull(row.reported_at),
    binary_version: (row.binary_version as string | null) ?? null,
    sync_status: (row.sync_status as string | null) ?? null,
    process_state: (row.process_state as string | null) ?? null,
    restarts_in_window: row.restarts_in_window === null || row.restarts_in_window === undefined ? null : Number(row.restarts_in_window),
    metrics: row.metrics === null || row.metrics === undefined ? {} : fromJson<Record<string, number>>(row.metrics),
  }
}

/**
 * The verdict over a window's observations, in order. A node restarted on a new binary does not
 * answer its probe at once (a real chain takes seconds to open its RPC port), so application
 * health counts as critical only once the node has come up: its first report after the upgrade
 * that the policy does not find critical. Until then a critical report (or the agent's own
 * `starting`) is the node starting; a node that never comes up within the window fails at its end.
 */
export class HealthJudge {
  #heartbeatSeen = false
  #cameUp = false
  #restartsAtFirstReport: number | undefined

  constructor(
    private readonly since: Date,
    private readonly policy: HealthPolicy,
    private readonly version: string,
  ) {}

  /** A failure, or undefined while the window may go on. */
  see(seen: Observation): HealthValidation | undefined {
    if (seen.state === 'down' || seen.state === 'failed') return { ok: false, reason: `the node is ${seen.state}` }
    if (!seen.reported_at || seen.reported_at.getTime() <= this.since.getTime() || seen.binary_version !== this.version) return undefined
    this.#heartbeatSeen = true
    if (seen.sync_status === 'stalled') return { ok: false, reason: 'the agent reports the chain head stalled' }
    if (seen.process_state === 'crash_loop') return { ok: false, reason: 'the chain process is in a crash loop' }
    const restarts = seen.restarts_in_window ?? 0
    this.#restartsAtFirstReport ??= restarts
    if (restarts > this.#restartsAtFirstReport) return { ok: false, reason: `the chain process restarted ${restarts - this.#restartsAtFirstReport} time(s) while being validated` }
    if (seen.process_state === 'starting') return undefined
    const report = { reported_at: seen.reported_at, process_state: seen.process_state ?? 'unknown', metrics: seen.metrics }
    const critical = applicationHealthFor(report, this.policy) === 'critical'
    if (critical && this.#cameUp) return { ok: false, reason: 'application health is critical by the chain\'s health policy' }
    if (!critical) this.#cameUp = true
    return undefined
  }

  /** The verdict when the window is over. */
  end(durationMs: number): HealthValidation {
    const seconds = Math.round(durationMs / 1000)
    if (!this.#heartbeatSeen) return { ok: false, reason: `no heartbeat within ${seconds} s of the upgrade` }
    if (!this.#cameUp) return { ok: false, reason: `application health stayed critical by the chain's health policy for the ${seconds} s after the upgrade (the node never came up)` }
    return { ok: true }
  }
}

export async function validateNodeHealth(db: Queryable, options: HealthValidationOptions): Promise<HealthValidation> {
  const until = options.since.getTime() + options.durationMs
  const judge = new HealthJudge(options.since, options.policy, options.version)
  for (;;) {
    options.heartbeat?.()
    const seen = await observe(db, options.nodeId)
    if (!seen) return { ok: false, reason: 'the node no longer exists' }
    const failure = judge.see(seen)
    if (failure) return failure
    if (options.now().getTime() >= until) return judge.end(options.durationMs)
    await new Promise((resolve) => setTimeout(resolve, options.pollIntervalMs))
  }
}
