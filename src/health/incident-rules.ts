/**
 * Incident vocabulary and rules (spec: "Incident", "Incident status"; docs/incidents.md): the
 * categories with their initial severities, the status table, and which health events raise
 * which category. Pure: no I/O.
 */
import type { HealthEvent } from '../nodes/health-state-machine.js'

export const INCIDENT_CATEGORIES = ['node_down', 'app_critical', 'app_degraded', 'sync_stalled', 'provision_failed', 'migration_failed', 'payment_unconfirmed', 'sync_flapping'] as const
export type IncidentCategory = (typeof INCIDENT_CATEGORIES)[number]

export const INCIDENT_SEVERITIES = ['warning', 'critical'] as const
export type IncidentSeverity = (typeof INCIDENT_SEVERITIES)[number]

export const INCIDENT_STATUSES = ['open', 'acknowledged', 'resolved', 'auto_resolved'] as const
export type IncidentStatus = (typeof INCIDENT_STATUSES)[number]

/** Statuses in which an incident is still "unresolved" (the dedup rule's scope). */
export const UNRESOLVED_STATUSES: readonly IncidentStatus[] = ['open', 'acknowledged']

/** Spec: initial severity per category. */
export const INITIAL_SEVERITY: Readonly<Record<IncidentCategory, IncidentSeverity>> = {
  node_down: 'critical',
  app_critical: 'critical',
  app_degraded: 'warning',
  sync_stalled: 'warning',
  provision_failed: 'critical',
  migration_failed: 'critical',
  // A payment.completed the payment service does not confirm (src/subscriptions/payment-confirmation.ts).
  payment_unconfirmed: 'critical',
  sync_flapping: 'warning',
}

/**
 * Categories that close themselves once the node is back (spec: "node returns to healthy").
 * A failed provisioning or migration needs a person: the node is `failed` (terminal) or runs on
 * its old host after a failed move, so nothing the node does later says the failure was handled.
 */
export const AUTO_RESOLVING_CATEGORIES: readonly IncidentCategory[] = ['node_down', 'app_critical', 'app_degraded', 'sync_stalled']

/** Spec "Incident status", exactly: every other move is a 409. */
export const INCIDENT_TRANSITIONS: Readonly<Record<IncidentStatus, readonly IncidentStatus[]>> = {
  open: ['acknowledged', 'resolved', 'auto_resolved'],
  acknowledged: ['resolved', 'auto_resolved'],
  resolved: [],
  auto_resolved: [],
}

export function canMoveIncident(from: IncidentStatus, to: IncidentStatus): boolean {
  return INCIDENT_TRANSITIONS[from].includes(to)
}

export function isIncidentCategory(value: unknown): value is IncidentCategory {
  return typeof value === 'string' && (INCIDENT_CATEGORIES as readonly string[]).includes(value)
}

/**
 * The reason text the migrate workflow gives its compensation (src/provisioning/migrate.ts,
 * `leaveMaintenance`). A migration that failed after its new host existed restores the node as
 * `degraded`, not `failed`; that is still a failed migration a user must hear about.
 */
const MIGRATION_FAILED_REASON = /^migration failed\b/i
/** The provision workflow's `markFailed` reason, for the forced path from a state other than provisioning. */
const PROVISIONING_FAILED_REASON = /^provisioning failed\b/i

/**
 * The category a health event raises, or null. Spec table, plus two readings written down in
 * docs/incidents.md: a forced (compensation) move out of `maintenance` into `degraded` whose
 * reason says the migration failed is `migration_failed`; a forced move into `failed` from
 * another state whose reason says provisioning failed is `provision_failed`.
 */
export function categoryForHealthEvent(event: Pick<HealthEvent, 'dimension' | 'from' | 'to' | 'forced' | 'reason'>): IncidentCategory | null {
  const reason = event.reason ?? ''
  switch (event.dimension) {
    case 'state':
      if (event.to === 'down') return 'node_down'
      if (event.to === 'failed') {
        if (event.from === 'provisioning') return 'provision_failed'
        if (event.from === 'maintenance') return 'migration_failed'
        if (event.forced && PROVISIONING_FAILED_REASON.test(reason)) return 'provision_failed'
        if (event.forced && MIGRATION_FAILED_REASON.test(reason)) return 'migration_failed'
        return null
      }
      if (event.to === 'degraded' && event.from === 'maintenance' && event.forced && MIGRATION_FAILED_REASON.test(reason)) return 'migration_failed'
      return null
    case 'application_health':
      if (event.to === 'critical') return 'app_critical'
      if (event.to === 'degraded') return 'app_degraded'
      return null
    case 'sync_status':
      return event.to === 'stalled' ? 'sync_stalled' : null
  }
}

export interface FlappingRule {
  /** Transitions into one category of one node within `windowMs` that make it flapping. */
  threshold: number
  windowMs: number
  /** No transition into the category for this long clears flapping. */
  quietMs: number
}

export interface IncidentSettings {
  /** K: consecutive evaluation cycles with the node recovered before an incident auto-resolves. */
  resolutionDebounce: number
  flapping: FlappingRule
  /** An open (not acknowledged) warning incident still unrecovered after this long escalates to critical. */
  escalateAfterMs: number
}

export const DEFAULT_INCIDENT_SETTINGS: IncidentSettings = {
  resolutionDebounce: 3,
  flapping: { threshold: 3, windowMs: 15 * 60_000, quietMs: 15 * 60_000 },
  escalateAfterMs: 60 * 60_000,
}

const CATEGORY_TITLES: Readonly<Record<IncidentCategory, string>> = {
  node_down: 'is down',
  app_critical: 'application health is critical',
  app_degraded: 'application health is degraded',
  sync_stalled: 'sync has stalled',
  provision_failed: 'provisioning failed',
  migration_failed: 'migration failed',
  payment_unconfirmed: 'payment event not confirmed',
  sync_flapping: 'sync status is flapping',
}

/** `devnet node 0193a1b2: sync has stalled` */
export function incidentTitle(category: IncidentCategory, chainProfileId: string, nodeId: string): string {
  return `${chainProfileId} node ${nodeId.slice(0, 8)}: ${CATEGORY_TITLES[category]}`
}

/** The INCIDENT_* settings of the env schema (src/config/env.ts, `incidentEnv`) as the rules want them. */
export function incidentSettingsFromEnv(env: {
  INCIDENT_RESOLUTION_DEBOUNCE: number
  INCIDENT_FLAP_THRESHOLD: number
  INCIDENT_FLAP_WINDOW: number
  INCIDENT_FLAP_QUIET: number
  INCIDENT_ESCALATE_AFTER: number
}): IncidentSettings {
  return {
    resolutionDebounce: env.INCIDENT_RESOLUTION_DEBOUNCE,
    flapping: { threshold: env.INCIDENT_FLAP_THRESHOLD, windowMs: env.INCIDENT_FLAP_WINDOW, quietMs: env.INCIDENT_FLAP_QUIET },
    escalateAfterMs: env.INCIDENT_ESCALATE_AFTER,
  }
}
