/**
 * Policy evaluation (spec: application_health is written only by the policy evaluation;
 * docs/health.md): the latest report of each node's agent (`agent_status`, written with the
 * heartbeats) against its chain profile's `health_policy`. One read of the evaluated fleet per
 * cycle; only nodes whose application_health changes are written, through the health state
 * machine's set-based path.
 *
 * - No report, or one older than the heartbeat timeout: `unknown` (nothing current to judge).
 * - A report received before the node's last state move is not judged yet: the node keeps its
 *   application_health until the next report. A node a migration or provisioning has just moved
 *   out of `maintenance`/`provisioning` would otherwise be judged on a report of its new host taken
 *   before the workflow started the chain (`stopped`), and raise a critical incident for one cycle.
 * - A report of a process still `starting` (not yet answering its probe, within the probe's
 *   start-up grace): `unknown` too, so a node coming up raises no application incident.
 * - A report of a chain process that is not running (`stopped`, `unconfigured`) on a judged
 *   node: `critical` (nothing serves; the agent sends no metrics for the rules to judge).
 * - Otherwise the worst of: each rule (a metric the report lacks is not judged), and the chain
 *   process crash-looping (`crash_loop` of the policy, critical by default).
 * - `block_lag` is derived: the reference head minus this node's block_height. The reference is
 *   the policy's `block_lag_reference`: `fleet` (the default), the lower median of the heads the
 *   other nodes of the same chain profile report (block_height or the highest_block a syncing
 *   node sees; at least two of them), so no one agent can move it (referenceHead);
 *   `node`, only the highest_block the node itself reports while syncing.
 */
import { DEFAULT_HEALTH_POLICY, type HealthPolicy, type HealthRule } from '../config/health-policy.js'
import type { ChainCatalogue } from '../config/chains.js'
import { fromJson, toDateOrNull } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import type { Logger } from '../log.js'
import { upstreamFailureRatio } from '../rpc-gateway/upstream-health.js'
import { applyHealthChanges, type HealthChangesResult, type NodeHealthChange } from '../nodes/health-state-machine.js'
import { findNodes } from '../nodes/node-store.js'
import type { ApplicationHealth, NodeState } from '../nodes/states.js'

/** Derived from the rpc-gateways' counts (rpc_upstream_health), judged by the policy's rpc_upstream_failures. */
export const UPSTREAM_FAILURE_METRIC = 'rpc_upstream_failure_ratio'

/** Changes written per transaction (one set-based write each). */
const CHANGES_PER_TRANSACTION = 1_000

/** Maintenance is skipped (spec); provisioning has no chain to judge yet; terminal nodes stay unknown. */
export const POLICY_EVALUATED_STATES: readonly NodeState[] = ['syncing', 'healthy', 'degraded', 'down']

export interface AgentReport {
  reported_at: Date
  process_state: string
  metrics: Record<string, number>
}

const SEVERITY: Record<ApplicationHealth, number> = { unknown: -1, ok: 0, degraded: 1, critical: 2 }

function worst(a: ApplicationHealth, b: ApplicationHealth): ApplicationHealth {
  return SEVERITY[b] > SEVERITY[a] ? b : a
}

export function ruleResult(rule: HealthRule, value: number | undefined): ApplicationHealth {
  if (value === undefined) return 'ok'
  if ((rule.critical_below !== undefined && value < rule.critical_below) || (rule.critical_above !== undefined && value > rule.critical_above)) return 'critical'
  if ((rule.degraded_below !== undefined && value < rule.degraded_below) || (rule.degraded_above !== undefined && value > rule.degraded_above)) return 'degraded'
  return 'ok'
}

/**
 * The application_health a fresh report earns under `policy`; `derived` holds metrics like
 * block_lag. With `findings`, what made it worse than ok is pushed there for the health event's
 * reason (`rpc_up 0 (critical below 1)`): only for a change, not on every node of every cycle.
 */
export function applicationHealthFor(report: AgentReport, policy: HealthPolicy, derived: Record<string, number> = {}, findings?: string[]): ApplicationHealth {
  if (report.process_state === 'starting') return 'unknown'
  // No chain process to probe: its metrics are missing, so no rule would fire.
  if (report.process_state === 'stopped' || report.process_state === 'unconfigured') {
    findings?.push(`chain process ${report.process_state}`)
    return 'critical'
  }
  let health: ApplicationHealth = 'ok'
  if (report.process_state === 'crash_loop') {
    health = policy.crash_loop
    findings?.push('chain process crash-looping')
  }
  for (const rule of [...policy.rules, { metric: UPSTREAM_FAILURE_METRIC, ...policy.rpc_upstream_failures }]) {
    // What callers see comes only from the gateways' counts, never from the agent's own report.
    const value = rule.metric === UPSTREAM_FAILURE_METRIC ? derived[rule.metric] : (derived[rule.metric] ?? report.metrics[rule.metric])
    const result = ruleResult(rule, value)
    if (result === 'ok') continue
    health = worst(health, result)
    findings?.push(`${rule.metric} ${value} (${describeBreach(rule, result, value as number)})`)
  }
  return health
}

function describeBreach(rule: HealthRule, level: ApplicationHealth, value: number): string {
  const below = level === 'critical' ? rule.critical_below : rule.degraded_below
  return below !== undefined && value < below ? `${level} below ${below}` : `${level} above ${level === 'critical' ? rule.critical_above : rule.degraded_above}`
}

/** The head a report claims: the higher of its block_height and the highest_block a syncing node sees. */
export function reportedHead(report: AgentReport): number | undefined {
  let best: number | undefined
  for (const name of ['block_height', 'highest_block']) {
    const value = report.metrics[name]
    if (value !== undefined && Number.isFinite(value) && (best === undefined || value > best)) best = value
  }
  return best
}

/** Fewer other nodes than this: no fleet reference (one other node alone would be the whole reference). */
export const MIN_REFERENCE_NODES = 2

/**
 * block_lag's reference under `fleet` for one node: the lower median of the heads the *other*
 * fresh nodes of the chain profile report (`othersSorted`, ascending, the node's own head taken
 * out), or undefined with fewer than MIN_REFERENCE_NODES of them. Agents are run by tenants'
 * hosts and are not trusted: a single report of block_height=1e12 must not make every other
 * node lag. The lower median of two or more values is never above the second-highest, so no one
 * node can raise the reference beyond what another node reports; a minority cannot move it at all.
 */
export function referenceHead(othersSorted: readonly number[]): number | undefined {
  if (othersSorted.length < MIN_REFERENCE_NODES) return undefined
  return othersSorted[Math.floor((othersSorted.length - 1) / 2)]
}

/** The fleet's heads, ascending, able to answer "the reference for the node whose own head is h". */
export class FleetHeads {
  private readonly sorted: number[]
  constructor(heads: Iterable<number>) {
    this.sorted = [...heads].sort((a, b) => a - b)
  }

  /** The reference for a node of this fleet whose own head is `own` (undefined: it reports none). */
  referenceFor(own: number | undefined): number | undefined {
    const n = this.sorted.length - (own === undefined ? 0 : 1)
    if (n < MIN_REFERENCE_NODES) return undefined
    // Index of the lower median among the others, in the list with `own` removed.
    const k = Math.floor((n - 1) / 2)
    if (own === undefined) return this.sorted[k]
    const at = lowerBound(this.sorted, own)
    // Removing the element at `at` shifts everything after it down by one.
    return this.sorted[k < at ? k : k + 1]
  }
}

function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if ((sorted[mid] as number) < value) lo = mid + 1
    else hi = mid
  }
  return lo
}

export interface PolicyEvaluationOptions {
  now: Date
  catalogue: ChainCatalogue
  /** A report older than this is not current: HEARTBEAT_TIMEOUT. */
  reportMaxAgeMs: number
  logger: Logger
}

export interface PolicyEvaluationResult {
  evaluated: number
  changes: Array<{ node_id: string; from: ApplicationHealth; to: ApplicationHealth }>
  conflicts: number
}

interface EvaluatedNode {
  id: string
  chain_profile_id: string
  application_health: ApplicationHealth
  version: number
  state_changed_at: Date
  report: AgentReport | undefined
  /** rpc_upstream_failure_ratio from what the gateways saw; undefined: too few calls, or none lately. */
  upstreamFailureRatio: number | undefined
}

interface Row {
  id: unknown
  chain_profile_id: unknown
  application_health: unknown
  version: unknown
  state_changed_at: unknown
  report_at: unknown
  report_metrics: unknown
  report_process_state: unknown
  upstream_window_start_ms: unknown
  upstream_answered: unknown
  upstream_failed: unknown
}

export async function evaluatePolicies(db: Db, options: PolicyEvaluationOptions): Promise<PolicyEvaluationResult> {
  const freshSince = options.now.getTime() - options.reportMaxAgeMs
  // Only what the judgement needs: reading whole node rows for the fleet costs more than the judging.
  const rows = (await db('nodes')
    .leftJoin('agent_status', 'agent_status.node_id', 'nodes.id')
    .leftJoin('rpc_upstream_health', 'rpc_upstream_health.node_id', 'nodes.id')
    .whereIn('nodes.state', POLICY_EVALUATED_STATES)
    .select(
      'nodes.id',
      'nodes.chain_profile_id',
      'nodes.application_health',
      'nodes.version',
      'nodes.state_changed_at',
      'agent_status.reported_at as report_at',
      'agent_status.metrics as report_metrics',
      'agent_status.process_state as report_process_state',
      'rpc_upstream_health.window_start_ms as upstream_window_start_ms',
      'rpc_upstream_health.answered as upstream_answered',
      'rpc_upstream_health.failed as upstream_failed',
    )) as Row[]

  const fleet: EvaluatedNode[] = rows.map((row) => {
    const reportedAt = toDateOrNull(row.report_at)
    const report =
      reportedAt && reportedAt.getTime() >= freshSince
        ? { reported_at: reportedAt, process_state: String(row.report_process_state), metrics: fromJson<Record<string, number>>(row.report_metrics) }
        : undefined
    return {
      id: String(row.id),
      chain_profile_id: String(row.chain_profile_id),
      application_health: row.application_health as ApplicationHealth,
      version: Number(row.version),
      state_changed_at: toDateOrNull(row.state_changed_at) ?? new Date(0),
      report,
      upstreamFailureRatio: upstreamFailureRatio({ window_start_ms: row.upstream_window_start_ms, answered: row.upstream_answered, failed: row.upstream_failed }, options.now.getTime()),
    }
  })

  const byChain = new Map<string, number[]>()
  for (const { chain_profile_id: chain, report } of fleet) {
    if (!report || policyOf(options.catalogue, chain).block_lag_reference === 'node') continue
    const head = reportedHead(report)
    if (head === undefined) continue
    const heads = byChain.get(chain)
    if (heads) heads.push(head)
    else byChain.set(chain, [head])
  }
  const heads = new Map([...byChain].map(([chain, list]) => [chain, new FleetHeads(list)]))

  const targets: Array<{ node: EvaluatedNode; to: ApplicationHealth; findings: string[] }> = []
  for (const node of fleet) {
    const { report } = node
    if (report && report.reported_at.getTime() < node.state_changed_at.getTime()) continue
    const policy = policyOf(options.catalogue, node.chain_profile_id)
    const derived = report ? derivedMetrics(report, policy, heads.get(node.chain_profile_id)?.referenceFor(reportedHead(report)), node.upstreamFailureRatio) : {}
    const to = report ? applicationHealthFor(report, policy, derived) : 'unknown'
    if (to === node.application_health) continue
    const findings: string[] = []
    if (report) applicationHealthFor(report, policy, derived, findings)
    targets.push({ node, to, findings })
  }

  const result: PolicyEvaluationResult = { evaluated: fleet.length, changes: [], conflicts: 0 }
  // Changes are written set-based, a chunk per transaction.
  for (let i = 0; i < targets.length; i += CHANGES_PER_TRANSACTION) {
    const chunk = targets.slice(i, i + CHANGES_PER_TRANSACTION)
    let written: HealthChangesResult
    try {
      written = await db.transaction((trx) => writeChanges(trx, chunk, options.now))
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err
      written = { applied: [], conflicts: chunk.map(({ node }) => ({ nodeId: node.id, message: err.message })) }
    }
    for (const { event } of written.applied) result.changes.push({ node_id: event.node_id, from: event.from as ApplicationHealth, to: event.to as ApplicationHealth })
    for (const { nodeId, message } of written.conflicts) options.logger.debug({ nodeId, err: message }, 'node changed during policy evaluation; next cycle')
    result.conflicts += written.conflicts.length
  }
  return result
}

/** The version the cycle read is the one checked: a node changed since is a conflict, judged again next cycle. */
async function writeChanges(trx: Queryable, chunk: Array<{ node: EvaluatedNode; to: ApplicationHealth; findings: string[] }>, now: Date): Promise<HealthChangesResult> {
  const current = new Map((await findNodes(trx, chunk.map(({ node }) => node.id))).map((n) => [n.id, n]))
  const stale: HealthChangesResult['conflicts'] = []
  const changes: NodeHealthChange[] = []
  for (const { node, to, findings } of chunk) {
    const read = current.get(node.id)
    if (read?.version !== node.version) {
      stale.push({ nodeId: node.id, message: read ? `version ${node.version} was read, ${read.version} is current` : 'the node is gone' })
      continue
    }
    const reason = !node.report ? 'no current agent report' : `health policy of ${node.chain_profile_id}${findings.length > 0 ? `: ${findings.join(', ')}` : ''}`
    changes.push({ node: read, change: { writer: 'policy_evaluation', application_health: to }, reason })
  }
  const written = await applyHealthChanges(trx, changes, now)
  return { applied: written.applied, conflicts: [...stale, ...written.conflicts] }
}

function policyOf(catalogue: ChainCatalogue, chainProfileId: string): HealthPolicy {
  return catalogue.profiles.get(chainProfileId)?.health_policy ?? DEFAULT_HEALTH_POLICY
}

/**
 * The metrics derived for a report under `policy`: block_lag, against `fleetHead` (referenceHead of
 * the other nodes' fresh reports) or, with block_lag_reference `node`, against the highest_block the
 * node itself reports. A node reporting no highest_block gets no block_lag (its rule is not
 * judged, or judges a block_lag the probe itself reports) rather than its own head minus its own
 * head: for a synced node both judge the same, but a syncing node whose client omits
 * highestBlock does not know how far behind it is, and a lag of 0 would claim it is at the head.
 */
export function derivedMetrics(report: AgentReport, policy: HealthPolicy, fleetHead: number | undefined, upstreamFailureRatio?: number): Record<string, number> {
  const height = report.metrics.block_height
  const head = policy.block_lag_reference === 'node' ? report.metrics.highest_block : fleetHead
  const derived: Record<string, number> = head !== undefined && height !== undefined ? { block_lag: Math.max(0, head - height) } : {}
  if (upstreamFailureRatio !== undefined) derived[UPSTREAM_FAILURE_METRIC] = upstreamFailureRatio
  return derived
}
