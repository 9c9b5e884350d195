/**
 * A chain profile's method policy (its `rpc` section, src/config/rpc-policy.ts) compiled for
 * one node type: `check(method)` says why a method is refused, or nothing when it may pass.
 * Order: the chain's `deny` rules, then the node type's `deny` rules, then its `allow` list.
 */
import type { RpcPolicySpec } from '../config/rpc-policy.js'

export interface MethodPolicy {
  /** The refusal's message, or undefined when the method passes. */
  check(method: string): string | undefined
}

type Matcher = (method: string) => boolean

function matcher(patterns: readonly string[]): Matcher {
  const exact = new Set(patterns.filter((p) => !p.endsWith('*')))
  const prefixes = patterns.filter((p) => p.endsWith('*')).map((p) => p.slice(0, -1))
  return (method) => exact.has(method) || prefixes.some((prefix) => method.startsWith(prefix))
}

export const OPEN_POLICY: MethodPolicy = { check: () => undefined }

export function compilePolicy(spec: RpcPolicySpec | undefined, chain: string, nodeType: string): MethodPolicy {
  if (!spec) return OPEN_POLICY
  const typeSpec = spec.node_types[nodeType]
  const denies = [...spec.deny, ...(typeSpec?.deny ?? [])].map((rule) => ({ matches: matcher(rule.methods), reason: rule.reason }))
  const allowed = typeSpec?.allow ? matcher(typeSpec.allow) : undefined
  return {
    check(method) {
      for (const rule of denies) if (rule.matches(method)) return `method ${method} is not available: ${rule.reason}`
      if (allowed && !allowed(method)) return `method ${method} is not offered by a ${nodeType} node of ${chain}`
      return undefined
    },
  }
}
