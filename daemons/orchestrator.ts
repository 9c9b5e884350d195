/**
 * The `orchestrator` daemon: runs the durable workflow worker (src/workflows) with the node
 * lifecycle and rollout workflows, and the payment event consumer `main-app-payment`, which activates paid
 * subscriptions and starts their provision workflows (src/subscriptions/activation.ts). Any
 * number of orchestrators may share one Postgres; runs are spread between them by leases, and
 * payment events between their consumers by the durable consumer.
 */
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { z } from 'zod'
import type { ChainSource } from '../src/config/chain-source.js'
import { lifecycleEnv, orchestratorEnv, type hostsEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import type { BusSubscription, EventBus } from '../src/events/bus.js'
import { ConfigError } from '../src/errors.js'
import type { Logger } from '../src/log.js'
import type { MasterKey } from '../src/secrets/master-key.js'
import type { ReleasePublicKey } from '../src/artifacts/release-keys.js'
import { registerLifecycleWorkflows, type LifecycleDeps } from '../src/provisioning/index.js'
import { registerRolloutWorkflows } from '../src/rollouts/index.js'
import { startPaymentConsumer } from '../src/subscriptions/activation.js'
import type { PaymentLookup } from '../src/subscriptions/payment-confirmation.js'
import { openHostFleet } from '../src/hosts/fleet.js'
import { scheduleReservationReconciler } from '../src/hosts/reservation-reconciler.js'
import { DEFAULT_INSTANCE_TYPES } from '../src/hosts/instance-types.js'
import { LocalInfrastructureProvider } from '../src/provisioning/infrastructure/local.js'
import { SshInfrastructureProvider } from '../src/provisioning/infrastructure/ssh.js'
import type { InfrastructureProvider } from '../src/provisioning/infrastructure/types.js'
import { createWorkflowRegistry, createWorkflowWorker, type WorkflowRegistry, type WorkflowWorker } from '../src/workflows/index.js'
import { devCaDir } from './agent-gateway.js'

export { orchestratorEnv }

export type OrchestratorSettings = Pick<z.infer<typeof orchestratorEnv>, 'WORKFLOW_LEASE' | 'WORKFLOW_POLL_INTERVAL' | 'WORKFLOW_CONCURRENCY'>
export type LifecycleSettings = z.infer<z.ZodObject<typeof lifecycleEnv>> & {
  NODEPLANE_DATA_DIR: string
  AGENT_GATEWAY_PORT: number
  LOG_LEVEL: string
  /** Handed to the agents the local provider starts, so they can verify signed artifacts from the store. */
  ARTIFACT_RELEASE_PUBLIC_KEYS?: ReleasePublicKey[]
  /** Whether those agents refuse unsigned artifacts; unset: false, as the shipped chain releases are unsigned. */
  AGENT_REQUIRE_SIGNED_ARTIFACTS?: boolean | undefined
} & Partial<z.infer<z.ZodObject<typeof hostsEnv>>>

/** The lifecycle's dependencies, and what stops the reservation reconciler and closes the fleet's SSH connections they opened. */
export type OpenLifecycleDeps = LifecycleDeps & { close(): Promise<void> }

/**
 * The infrastructure providers (`local`, and `ssh` on the registered host fleet) and how new agents
 * reach the gateway, from the settings, with the host reservation reconciler running (a periodic
 * job under its lease: it needs the ssh provider to clean hosts up); `chains` is opened by the
 * caller (who closes it), and the caller closes the result after the workflow worker (the
 * reconciler, then the fleet's SSH connections).
 */
export async function lifecycleDeps(settings: LifecycleSettings, deps: { db: Db; logger: Logger; masterKey: MasterKey; chains: ChainSource; now?: () => Date }): Promise<OpenLifecycleDeps> {
  const caFile = settings.AGENT_GATEWAY_CA_FILE ?? path.join(devCaDir(settings.NODEPLANE_DATA_DIR), 'ca.pem')
  if (!fs.existsSync(caFile)) {
    throw new ConfigError([
      `AGENT_GATEWAY_CA_FILE=${JSON.stringify(caFile)}: file not found; set it to the CA that signed the agent-gateway's certificate (the gateway creates the development CA there on its first start)`,
    ])
  }
  const requireSigned = settings.AGENT_REQUIRE_SIGNED_ARTIFACTS ?? false
  if (requireSigned && (settings.ARTIFACT_RELEASE_PUBLIC_KEYS ?? []).length === 0) {
    throw new ConfigError(['AGENT_REQUIRE_SIGNED_ARTIFACTS=true: the agents would have no release public key to verify a signature with; set ARTIFACT_RELEASE_PUBLIC_KEYS'])
  }
  const agentEnv = {
    LOG_LEVEL: settings.LOG_LEVEL,
    ...releaseKeysEnv(settings.ARTIFACT_RELEASE_PUBLIC_KEYS ?? []),
    // Explicit: an agent with keys would otherwise require signatures, and refuse the unsigned
    // releases of the shipped chain profiles (docs/artifacts.md, "Agents").
    AGENT_REQUIRE_SIGNED_ARTIFACTS: String(requireSigned),
    // The agents fence on the same timeout the migrate workflow waits for (docs/node-agent.md).
    NODE_AGENT_FENCE_TIMEOUT: `${settings.AGENT_FENCE_TIMEOUT}ms`,
  }
  const local = new LocalInfrastructureProvider({
    root: settings.LOCAL_HOSTS_DIR ?? path.join(settings.NODEPLANE_DATA_DIR, 'hosts'),
    logger: deps.logger.child({ component: 'local-provider' }),
    agentEnv,
  })
  // Connections open on first use: with no host registered, the fleet costs nothing.
  const fleet = openHostFleet(settings)
  const ssh = new SshInfrastructureProvider({
    db: deps.db,
    pool: fleet.pool,
    keys: fleet.keys,
    logger: deps.logger.child({ component: 'ssh-provider' }),
    instanceTypes: settings.HOSTS_INSTANCE_TYPES ?? DEFAULT_INSTANCE_TYPES,
    placementWaitMs: settings.HOSTS_PLACEMENT_WAIT ?? 5 * 60_000,
    placementRetryIntervalMs: settings.HOSTS_PLACEMENT_RETRY_INTERVAL ?? 15_000,
    agentSupervisor: settings.HOSTS_AGENT_SUPERVISOR ?? 'auto',
    ...(settings.HOSTS_AGENT_BUNDLE ? { agentBundle: settings.HOSTS_AGENT_BUNDLE } : {}),
    ...(settings.HOSTS_RPC_PORTS ? { rpcPorts: settings.HOSTS_RPC_PORTS } : {}),
    agentEnv,
    ...(deps.now ? { now: deps.now } : {}),
  })
  // Placements whose node is gone from the host, released here where the ssh provider can clean up.
  const reconciler = scheduleReservationReconciler(
    { db: deps.db, logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) },
    { db: deps.db, logger: deps.logger.child({ component: 'host-reservations' }), destroy: (hostId) => ssh.destroyHost(hostId) },
    settings.HOSTS_RECONCILE_INTERVAL ?? 60_000,
  )
  return {
    db: deps.db,
    logger: deps.logger,
    chains: deps.chains,
    masterKey: deps.masterKey,
    providers: new Map<string, InfrastructureProvider>([
      [local.name, local],
      [ssh.name, ssh],
    ]),
    agentBootstrap: {
      gatewayTarget: settings.AGENT_GATEWAY_URL ?? `127.0.0.1:${settings.AGENT_GATEWAY_PORT}`,
      caPem: fs.readFileSync(caFile, 'utf8'),
      ...(settings.AGENT_GATEWAY_SERVER_NAME ? { serverName: settings.AGENT_GATEWAY_SERVER_NAME } : {}),
    },
    backupStoreUrl: pathToFileURL(settings.BACKUP_STORE_DIR ?? path.join(settings.NODEPLANE_DATA_DIR, 'backups')).href,
    migrationCooldownMs: settings.MIGRATION_COOLDOWN,
    fenceTimeoutMs: settings.AGENT_FENCE_TIMEOUT,
    agentReadyWaitMs: settings.AGENT_READY_WAIT,
    commandTimeoutMs: settings.AGENT_COMMAND_TIMEOUT,
    pollIntervalMs: 250,
    ...(deps.now ? { now: deps.now } : {}),
    close: async () => {
      await reconciler.stop()
      await fleet.close()
    },
  }
}

/**
 * The release public keys as the node agent reads them. Without them an agent refuses every
 * signed artifact (docs/artifacts.md, "Agents"), so a rollout from the store could never install.
 */
function releaseKeysEnv(keys: ReleasePublicKey[]): Record<string, string> {
  return keys.length > 0 ? { ARTIFACT_RELEASE_PUBLIC_KEYS: keys.map((k) => Buffer.from(k.key).toString('base64')).join(',') } : {}
}

/** The workflows this orchestrator runs. */
export function orchestratorWorkflows(lifecycle?: LifecycleDeps): WorkflowRegistry {
  const registry = createWorkflowRegistry()
  return lifecycle ? registerRolloutWorkflows(registerLifecycleWorkflows(registry, lifecycle), lifecycle) : registry
}

export interface OrchestratorDeps {
  db: Db
  logger: Logger
  registry?: WorkflowRegistry
  now?: () => Date
}

export function startOrchestrator(settings: OrchestratorSettings, deps: OrchestratorDeps): WorkflowWorker {
  const worker = createWorkflowWorker({
    db: deps.db,
    registry: deps.registry ?? orchestratorWorkflows(),
    logger: deps.logger,
    leaseMs: settings.WORKFLOW_LEASE,
    pollIntervalMs: settings.WORKFLOW_POLL_INTERVAL,
    concurrency: settings.WORKFLOW_CONCURRENCY,
    ...(deps.now ? { now: deps.now } : {}),
  })
  worker.start()
  return worker
}

export interface PaymentActivationDeps {
  bus: EventBus
  db: Db
  logger: Logger
  chains: ChainSource
  /** The payment service's client: every payment.completed is confirmed with it first. */
  payments: PaymentLookup
  now?: () => Date
}

/**
 * Starts the payment event consumer (durable `main-app-payment` on `payment.*`); close the
 * returned subscription before the database. `nodeplane up` calls this with its in-process bus.
 */
export function startPaymentActivation(settings: { IDEMPOTENCY_KEY_TTL: number; PAYMENT_CONSUMER_CONCURRENCY: number }, deps: PaymentActivationDeps): Promise<BusSubscription> {
  return startPaymentConsumer({
    bus: deps.bus,
    db: deps.db,
    logger: deps.logger,
    chains: deps.chains,
    payments: deps.payments,
    idempotencyTtlMs: settings.IDEMPOTENCY_KEY_TTL,
    concurrency: settings.PAYMENT_CONSUMER_CONCURRENCY,
    ...(deps.now ? { now: deps.now } : {}),
  })
}
