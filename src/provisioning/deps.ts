/** What the node lifecycle workflows need, wired by the orchestrator (daemons/orchestrator.ts). */
import type { ChainSource } from '../config/chain-source.js'
import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import type { MasterKey } from '../secrets/master-key.js'
import { NonRetryableStepError } from '../workflows/errors.js'
import type { InfrastructureProvider } from './infrastructure/types.js'

export interface AgentBootstrapSettings {
  /** host:port agents dial (a load balancer in front of the gateways in production). */
  gatewayTarget: string
  caPem: string
  serverName?: string
}

export interface LifecycleDeps {
  db: Db
  logger: Logger
  /** Asked at each use, so a step after a catalogue change sees the new profiles. */
  chains: ChainSource
  /** Wraps the per-node data keys (docs/secrets.md). */
  masterKey: MasterKey
  providers: ReadonlyMap<string, InfrastructureProvider>
  agentBootstrap: AgentBootstrapSettings
  /** Spec: "wait for agent registration (5 minute limit)". */
  agentReadyWaitMs: number
  /** How long one agent command may take before the step gives up on it. */
  commandTimeoutMs: number
  /** `file://` store node snapshots are backed up to and restored from (migration). */
  backupStoreUrl: string
  /** Spec: migration cooldown between attempts, 1 hour. */
  migrationCooldownMs: number
  /**
   * Fencing (AGENT_FENCE_TIMEOUT): a migration starts the new host's chain no earlier than this
   * after the old agent's last contact with a gateway, by when a cut-off agent has stopped its chain.
   */
  fenceTimeoutMs: number
  /** How often the gateways check open streams' tokens again (default STREAM_TOKEN_RECHECK_MS; tests shorten both). */
  streamTokenRecheckMs?: number
  /** Poll interval while waiting on the agent (tests shorten it). */
  pollIntervalMs: number
  /** How often a host drain looks again at nodes that cannot migrate yet (default 1 s; tests shorten it). */
  drainPollIntervalMs?: number
  now?: () => Date
  /** Test-only: called as each forward provisioning step starts; throwing fails that attempt. */
  injectFault?: (step: string, nodeId: string) => void
}

/**
 * The adapter for `name`. Providers are wired once, when the orchestrator starts: one it was not
 * configured with does not appear on a retry, so the step fails at once (not after its retries).
 */
export function providerFor(deps: LifecycleDeps, name: string | null): InfrastructureProvider {
  const provider = name ? deps.providers.get(name) : undefined
  if (!provider) throw new NonRetryableStepError(`no infrastructure provider "${name ?? '(none)'}" is configured (have: ${[...deps.providers.keys()].join(', ') || 'none'})`)
  return provider
}
