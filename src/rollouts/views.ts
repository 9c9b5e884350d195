/**
 * The API's JSON of rollouts, rollout nodes and rollout groups (docs/rollouts.md, "API"):
 * snake_case, the spec's fields plus what an operator watching needs (pause_reason, awaiting,
 * current_batch, batch_count, forced, error_message, timestamps). Durations are shown as
 * duration strings (`5m`) and in milliseconds. The schemas document the OpenAPI answers.
 */
import { UPGRADE_PHASES } from '../agent-gateway/protocol.js'
import { z } from '../http/zod.js'
import { MIGRATION_TYPES } from './manifests.js'
import { FAILURE_POLICIES, ROLLOUT_GROUP_STATUSES, ROLLOUT_NODE_STATUSES, ROLLOUT_STATUSES, ROLLOUT_STRATEGIES } from './states.js'
import type { GroupComponent, NodeStatusCounts, RolloutGroupRecord, RolloutNodeRecord, RolloutRecord } from './store.js'

const UNITS: [string, number][] = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1_000],
  ['ms', 1],
]

/** Milliseconds as the shortest duration string parseDuration reads back: 300000 -> `5m`, 5400000 -> `1h30m`. */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s'
  let rest = Math.round(ms)
  let text = ''
  for (const [unit, size] of UNITS) {
    const n = Math.floor(rest / size)
    if (n > 0) {
      text += `${n}${unit}`
      rest -= n * size
    }
  }
  return text
}

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })
const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString())

const configChangesView = z
  .object({
    config_version: z.string().optional(),
    files: z.array(z.object({ path: z.string(), template: z.string(), mode: z.number().int().optional() })).optional(),
    run: z.object({ args: z.array(z.string()).optional(), env: z.record(z.string()).optional() }).optional(),
  })
  .openapi('UpgradeConfigChanges')

const manifestFields = {
  migration_type: z.enum(MIGRATION_TYPES).nullable().openapi({ description: 'breaking: a canary batch waits for approve_canary' }),
  recovery_plan: z.string().nullable().openapi({ description: "The manifest's runbook for a node whose automatic compensation failed; null in manual mode" }),
  config_changes: configChangesView.nullable().openapi({ description: 'Config templates written with the new binary (rendered per node); null when only the binary changes' }),
  compatible_source_versions: z.array(z.string()).nullable().openapi({ description: "The manifest's state compatibility; null in manual mode" }),
}

export const rolloutView = z
  .object({
    id: z.string().uuid(),
    group_id: z.string().uuid().nullable().openapi({ description: 'null for a standalone rollout' }),
    component_index: z.number().int().nullable().openapi({ description: 'Order within the group' }),
    upgrade_id: z.string().nullable().openapi({ description: 'The manifest (auto mode); null in manual mode' }),
    chain_profile_id: z.string().openapi({ example: 'devnet' }),
    node_type: z.string().openapi({ example: 'full' }),
    binary_name: z.string().openapi({ example: 'devnet-node' }),
    source_version: z.string().openapi({ example: '1.0.0' }),
    target_version: z.string().openapi({ example: '1.1.0' }),
    target_binary_url: z.string(),
    target_binary_checksum: z.string().openapi({ description: 'sha256:<hex>' }),
    strategy: z.enum(ROLLOUT_STRATEGIES),
    status: z.enum(ROLLOUT_STATUSES),
    batch_size: z.number().int(),
    canary_size: z.number().int().nullable().openapi({ description: 'canary strategy only' }),
    failure_threshold: z.number(),
    health_wait_duration: z.string().openapi({ example: '5m' }),
    health_wait_duration_ms: z.number().int(),
    total_nodes: z.number().int(),
    succeeded_nodes: z.number().int(),
    failed_nodes: z.number().int(),
    manifest_content_hash: z.string().nullable().openapi({ description: 'sha256:<hex> of the manifest file at creation; null in manual mode' }),
    ...manifestFields,
    created_by: z.string().openapi({ description: 'User id of the operator who created it' }),
    reason: z.string().nullable(),
    pause_reason: z.string().nullable().openapi({ description: 'operator, failure_threshold, canary_failed or rollback while paused' }),
    awaiting: z.string().nullable().openapi({ description: 'What it waits for, e.g. approve_canary' }),
    current_batch: z.number().int().nullable(),
    batch_count: z.number().int().nullable(),
    forced: z.boolean().openapi({ description: 'The failure threshold was overridden (force)' }),
    error_message: z.string().nullable(),
    scheduled_at: timestamp.nullable(),
    started_at: timestamp.nullable(),
    completed_at: timestamp.nullable(),
    version: z.number().int(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .openapi('Rollout')

export type RolloutView = z.infer<typeof rolloutView>

const changed = z.boolean().openapi({ description: 'false for a repeat: the signal\'s effect already held and nothing was sent (docs/cli.md, "Repeats")' })

/** What a start or a signal answers: the rollout as it is now, and whether this call changed anything. */
export const signalledRolloutView = rolloutView.extend({ changed }).openapi('SignalledRollout')
export type SignalledRolloutView = z.infer<typeof signalledRolloutView>

export const nodeCountsView = z
  .object(Object.fromEntries(ROLLOUT_NODE_STATUSES.map((s) => [s, z.number().int()])) as Record<(typeof ROLLOUT_NODE_STATUSES)[number], z.ZodNumber>)
  .openapi('RolloutNodeCounts')

export const rolloutDetailView = rolloutView
  .extend({ node_counts: nodeCountsView.openapi({ description: "How many of the rollout's nodes are in each status" }) })
  .openapi('RolloutDetail')

export type RolloutDetailView = z.infer<typeof rolloutDetailView>

export const rolloutNodeView = z
  .object({
    id: z.string().uuid(),
    rollout_id: z.string().uuid(),
    node_id: z.string().uuid(),
    batch_index: z.number().int(),
    status: z.enum(ROLLOUT_NODE_STATUSES),
    upgrade_phase: z.enum(UPGRADE_PHASES).nullable().openapi({ description: 'Where the upgrade is: preparing, stopped, mutating, starting, verifying, completed; rollbacking, rolled_back or failed_rollback on failure' }),
    previous_version: z.string().nullable().openapi({ description: 'Kept for rollback' }),
    previous_binary_url: z.string().nullable(),
    previous_checksum: z.string().nullable(),
    error_message: z.string().nullable(),
    attempt_count: z.number().int(),
    started_at: timestamp.nullable(),
    completed_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .openapi('RolloutNode')

export type RolloutNodeView = z.infer<typeof rolloutNodeView>

const componentView = z
  .object({
    binary_name: z.string(),
    node_type: z.string(),
    version: z.string(),
    url: z.string(),
    checksum: z.string().openapi({ description: 'sha256:<hex>' }),
    upgrade_id: z.string().nullable(),
    migration_type: z.enum(MIGRATION_TYPES),
    manifest_content_hash: z.string().nullable(),
  })
  .openapi('RolloutGroupComponent')

export const rolloutGroupView = z
  .object({
    id: z.string().uuid(),
    chain_profile_id: z.string(),
    node_type: z.string(),
    status: z.enum(ROLLOUT_GROUP_STATUSES),
    failure_policy: z.enum(FAILURE_POLICIES),
    component_order: z.array(componentView),
    desired_versions: z.record(z.string()),
    strategy: z.enum(ROLLOUT_STRATEGIES),
    batch_size: z.number().int(),
    canary_size: z.number().int().nullable(),
    failure_threshold: z.number(),
    health_wait_duration: z.string().openapi({ example: '5m' }),
    health_wait_duration_ms: z.number().int(),
    current_component_index: z.number().int().nullable(),
    created_by: z.string(),
    reason: z.string().nullable(),
    pause_reason: z.string().nullable(),
    error_message: z.string().nullable(),
    started_at: timestamp.nullable(),
    completed_at: timestamp.nullable(),
    version: z.number().int(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .openapi('RolloutGroup')

export const signalledGroupView = rolloutGroupView.extend({ changed }).openapi('SignalledRolloutGroup')
export type SignalledGroupView = z.infer<typeof signalledGroupView>

export type RolloutGroupView = z.infer<typeof rolloutGroupView>

export const componentProgressView = z
  .object({
    component_index: z.number().int(),
    binary_name: z.string(),
    node_type: z.string(),
    version: z.string(),
    upgrade_id: z.string().nullable(),
    rollout_id: z.string().uuid().nullable().openapi({ description: "The component's latest rollout; null before its turn" }),
    status: z.union([z.enum(ROLLOUT_STATUSES), z.literal('not_started')]),
    total_nodes: z.number().int(),
    succeeded_nodes: z.number().int(),
    failed_nodes: z.number().int(),
    started_at: timestamp.nullable(),
    completed_at: timestamp.nullable(),
  })
  .openapi('RolloutGroupComponentProgress')

export const rolloutGroupStatusView = rolloutGroupView.extend({ components: z.array(componentProgressView) }).openapi('RolloutGroupStatus')

export type RolloutGroupStatusView = z.infer<typeof rolloutGroupStatusView>

export function toRolloutView(r: RolloutRecord): RolloutView {
  return {
    id: r.id,
    group_id: r.group_id,
    component_index: r.component_index,
    upgrade_id: r.upgrade_id,
    chain_profile_id: r.chain_profile_id,
    node_type: r.node_type,
    binary_name: r.binary_name,
    source_version: r.source_version,
    target_version: r.target_version,
    target_binary_url: r.target_binary_url,
    target_binary_checksum: r.target_binary_checksum,
    strategy: r.strategy,
    status: r.status,
    batch_size: r.batch_size,
    canary_size: r.canary_size,
    failure_threshold: r.failure_threshold,
    health_wait_duration: formatDuration(r.health_wait_duration_ms),
    health_wait_duration_ms: r.health_wait_duration_ms,
    total_nodes: r.total_nodes,
    succeeded_nodes: r.succeeded_nodes,
    failed_nodes: r.failed_nodes,
    manifest_content_hash: r.manifest_content_hash,
    migration_type: r.migration_type,
    recovery_plan: r.manifest?.recovery_plan ?? null,
    config_changes: r.manifest?.config_changes ?? null,
    compatible_source_versions: r.manifest?.state_compatibility.compatible_source_versions ?? null,
    created_by: r.created_by,
    reason: r.reason,
    pause_reason: r.pause_reason,
    awaiting: r.awaiting,
    current_batch: r.current_batch,
    batch_count: r.batch_count,
    forced: r.forced,
    error_message: r.error_message,
    scheduled_at: iso(r.scheduled_at),
    started_at: iso(r.started_at),
    completed_at: iso(r.completed_at),
    version: r.version,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  }
}

export function toRolloutDetailView(r: RolloutRecord, counts: NodeStatusCounts): RolloutDetailView {
  return { ...toRolloutView(r), node_counts: counts }
}

export function toRolloutNodeView(n: RolloutNodeRecord): RolloutNodeView {
  return {
    id: n.id,
    rollout_id: n.rollout_id,
    node_id: n.node_id,
    batch_index: n.batch_index,
    status: n.status,
    upgrade_phase: n.upgrade_phase,
    previous_version: n.previous_version,
    previous_binary_url: n.previous_binary_url,
    previous_checksum: n.previous_checksum,
    error_message: n.error_message,
    attempt_count: n.attempt_count,
    started_at: iso(n.started_at),
    completed_at: iso(n.completed_at),
    created_at: n.created_at.toISOString(),
    updated_at: n.updated_at.toISOString(),
  }
}

function toComponentView(c: GroupComponent): z.infer<typeof componentView> {
  return {
    binary_name: c.binary_name,
    node_type: c.node_type,
    version: c.version,
    url: c.url,
    checksum: c.checksum,
    upgrade_id: c.upgrade_id,
    migration_type: c.migration_type,
    manifest_content_hash: c.manifest_content_hash,
  }
}

export function toRolloutGroupView(g: RolloutGroupRecord): RolloutGroupView {
  return {
    id: g.id,
    chain_profile_id: g.chain_profile_id,
    node_type: g.node_type,
    status: g.status,
    failure_policy: g.failure_policy,
    component_order: g.component_order.map(toComponentView),
    desired_versions: g.desired_versions,
    strategy: g.strategy,
    batch_size: g.batch_size,
    canary_size: g.canary_size,
    failure_threshold: g.failure_threshold,
    health_wait_duration: formatDuration(g.health_wait_duration_ms),
    health_wait_duration_ms: g.health_wait_duration_ms,
    current_component_index: g.current_component_index,
    created_by: g.created_by,
    reason: g.reason,
    pause_reason: g.pause_reason,
    error_message: g.error_message,
    started_at: iso(g.started_at),
    completed_at: iso(g.completed_at),
    version: g.version,
    created_at: g.created_at.toISOString(),
    updated_at: g.updated_at.toISOString(),
  }
}

/** The group and, per component, its latest rollout's status and counters (`not_started` before its turn). */
export function toRolloutGroupStatusView(g: RolloutGroupRecord, rollouts: readonly RolloutRecord[]): RolloutGroupStatusView {
  const latest = new Map<number, RolloutRecord>()
  // listGroupRollouts orders by component, then creation: the last one seen per component wins.
  for (const r of rollouts) if (r.component_index !== null) latest.set(r.component_index, r)
  return {
    ...toRolloutGroupView(g),
    components: g.component_order.map((c, i) => {
      const r = latest.get(i)
      return {
        component_index: i,
        binary_name: c.binary_name,
        node_type: c.node_type,
        version: c.version,
        upgrade_id: c.upgrade_id,
        rollout_id: r?.id ?? null,
        status: r?.status ?? 'not_started',
        total_nodes: r?.total_nodes ?? 0,
        succeeded_nodes: r?.succeeded_nodes ?? 0,
        failed_nodes: r?.failed_nodes ?? 0,
        started_at: iso(r?.started_at ?? null),
        completed_at: iso(r?.completed_at ?? null),
      }
    }),
  }
}
