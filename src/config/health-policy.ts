/**
 * A chain profile's application-health policy (`health_policy` in profile.yaml; docs/health.md):
 * rules over the metrics the node's agent reports with its heartbeats. Each rule names a metric
 * and thresholds; the node's application_health is the worst result of its rules.
 */
import { z } from 'zod'

/** Metrics the evaluator derives instead of reading them from the agent's report. */
export const DERIVED_METRICS = ['block_lag', 'rpc_upstream_failure_ratio'] as const

const threshold = z.number().finite()

export const healthRuleSchema = z
  .object({
    metric: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, 'must be a metric name: lowercase letters, digits and "_"'),
    degraded_below: threshold.optional(),
    critical_below: threshold.optional(),
    degraded_above: threshold.optional(),
    critical_above: threshold.optional(),
  })
  .strict()
  .superRefine((rule, ctx) => {
    const problem = (message: string) => ctx.addIssue({ code: z.ZodIssueCode.custom, message })
    const { degraded_below: db, critical_below: cb, degraded_above: da, critical_above: ca } = rule
    if (db === undefined && cb === undefined && da === undefined && ca === undefined) {
      problem('needs at least one of degraded_below, critical_below, degraded_above, critical_above')
    }
    if (db !== undefined && cb !== undefined && cb > db) problem('critical_below must not be above degraded_below')
    if (da !== undefined && ca !== undefined && ca < da) problem('critical_above must not be below degraded_above')
  })

export const DEFAULT_RPC_UPSTREAM_FAILURES = { degraded_above: 0.2, critical_above: 0.5 }

export const healthPolicySchema = z
  .object({
    rules: z.array(healthRuleSchema).max(50).default([]),
    /** What an agent reporting a crash-looping chain process means for application_health. */
    crash_loop: z.enum(['critical', 'degraded']).default('critical'),
    /**
     * The head block_lag is measured against. `fleet`: the highest head any node of the chain
     * profile reports — right when the whole fleet follows one network. `node`: only what the node
     * itself reports as the network's head (`highest_block` while syncing) — for a chain whose
     * nodes are each a network of their own, like the local devnet.
     */
    block_lag_reference: z.enum(['fleet', 'node']).default('fleet'),
    /**
     * What callers of the node's endpoint see: the share of calls the rpc-gateways sent to it in
     * the last minute that timed out or found it unreachable (`rpc_upstream_failure_ratio`, judged
     * from 5 calls on). A node whose agent reports it fine while callers time out is not fine.
     */
    rpc_upstream_failures: z
      .object({ degraded_above: z.number().min(0).max(1), critical_above: z.number().min(0).max(1) })
      .strict()
      .refine((t) => t.critical_above >= t.degraded_above, 'critical_above must not be below degraded_above')
      .default(DEFAULT_RPC_UPSTREAM_FAILURES),
  })
  .strict()

export type HealthRule = z.infer<typeof healthRuleSchema>
export type HealthPolicy = z.infer<typeof healthPolicySchema>

/** For a profile without `health_policy`: a fresh report is ok unless the chain crash-loops. */
export const DEFAULT_HEALTH_POLICY: HealthPolicy = { rules: [], crash_loop: 'critical', block_lag_reference: 'fleet', rpc_upstream_failures: DEFAULT_RPC_UPSTREAM_FAILURES }
