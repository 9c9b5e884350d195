/**
 * The setting the lifecycle tests share: a real gateway, the local provider with real agent
 * processes under `root`, the repo's chain catalogue, a master key and the server key pair.
 */
import crypto from 'node:crypto'
import { pathToFileURL } from 'node:url'
import type { Logger } from 'pino'
import type { ArtifactBlobStore } from '../../../src/artifacts/blob-store.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, getProfile, loadChainCatalogue, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { registerLifecycleWorkflows, type LifecycleDeps } from '../../../src/provisioning/index.js'
import { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import { registerRolloutWorkflows } from '../../../src/rollouts/index.js'
import { LocalFileMasterKey, type MasterKey } from '../../../src/secrets/master-key.js'
import { ensureServerKeyPair } from '../../../src/secrets/server-key.js'
import { createWorkflowRegistry, createWorkflowWorker, getRun, type WorkflowRun, type WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { waitFor } from '../../helpers/ports.js'
import { devTls, quiet, startGateway, type RunningGateway } from '../agent-gateway/harness.js'

/** The gateway's recheck of open streams' tokens, and the migrate workflow's allowance for it. */
const STREAM_TOKEN_RECHECK_MS_IN_TESTS = 250

export interface LifecycleSetting {
  gateway: RunningGateway
  provider: LocalInfrastructureProvider
  deps: LifecycleDeps
  /** Where the local provider keeps hosts. */
  root: string
  /** The file:// backup store's directory. */
  store: string
  masterKey: MasterKey
}

export async function lifecycleSetting(
  db: Db,
  options: {
    logger?: Logger
    migrationCooldownMs?: number
    /** Fencing: the agents' NODE_AGENT_FENCE_TIMEOUT and the migrate workflow's wait (default 3 s). */
    fenceTimeoutMs?: number
    now?: () => Date
    heartbeatIntervalSeconds?: number
    /** devnet-node makes a block every this many ms (default: the profile's); see `withDevnetBlockTime`. */
    devnetBlockTimeMs?: number
    /** More environment for the hosts' node agents (e.g. ARTIFACT_RELEASE_PUBLIC_KEYS). */
    agentEnv?: Record<string, string>
    /** The agent program the local provider starts (default: this package's node agent). */
    agentCommand?: readonly string[]
    /** The artifact store the gateway serves to agents (FetchArtifact). */
    artifacts?: ArtifactBlobStore
    /** Changes the repo's catalogue (e.g. signed releases). */
    catalogue?: (catalogue: ChainCatalogue) => ChainCatalogue
  } = {},
): Promise<LifecycleSetting> {
  // `now`: one injected clock for the gateway and the workflows (tests that move time).
  const gateway = await startGateway(db, {
    heartbeatFlushIntervalMs: 50,
    commandPollIntervalMs: 50,
    tokenRecheckMs: STREAM_TOKEN_RECHECK_MS_IN_TESTS,
    ...(options.now ? { now: options.now } : {}),
    ...(options.heartbeatIntervalSeconds ? { heartbeatIntervalSeconds: options.heartbeatIntervalSeconds } : {}),
    ...(options.artifacts ? { artifacts: options.artifacts } : {}),
  })
  const root = tempDir('nodeplane-lifecycle-hosts-')
  const store = tempDir('nodeplane-lifecycle-backups-')
  const masterKey = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
  await ensureServerKeyPair(db, masterKey)
  const fenceTimeoutMs = options.fenceTimeoutMs ?? 3_000
  const provider = new LocalInfrastructureProvider({
    root,
    logger: quiet,
    ...(options.agentCommand ? { agentCommand: options.agentCommand } : {}),
    agentEnv: { LOG_LEVEL: 'info', NODE_AGENT_HEARTBEAT_INTERVAL: '200ms', NODE_AGENT_FENCE_TIMEOUT: `${fenceTimeoutMs}ms`, ...options.agentEnv },
  })
  const deps: LifecycleDeps = {
    db,
    logger: options.logger ?? quiet,
    chains: staticChainSource((options.catalogue ?? ((c: ChainCatalogue) => c))(withDevnetBlockTime(await loadChainCatalogue(defaultConfigDir()), options.devnetBlockTimeMs))),
    masterKey,
    providers: new Map([[provider.name, provider]]),
    agentBootstrap: { gatewayTarget: gateway.target, caPem: devTls().ca.toString() },
    backupStoreUrl: pathToFileURL(store).href,
    migrationCooldownMs: options.migrationCooldownMs ?? 3_600_000,
    fenceTimeoutMs,
    streamTokenRecheckMs: STREAM_TOKEN_RECHECK_MS_IN_TESTS,
    agentReadyWaitMs: 30_000,
    commandTimeoutMs: 60_000,
    pollIntervalMs: 50,
    ...(options.now ? { now: options.now } : {}),
  }
  return { gateway, provider, deps, root, store, masterKey }
}

/**
 * The catalogue with devnet-node making a block every `blockTimeMs` instead of the profile's
 * 500 ms: its sync (3 blocks) and any wait for blocks take a fifth as long at 100 ms, and nothing
 * else about the chain changes. Undefined: the catalogue as it is. Not for a test that tells two
 * chains apart by how far they got in a given time (the migrate test's restored chain against one
 * started from block 0): the test's own steps do not get faster with the blocks.
 */
export function withDevnetBlockTime(catalogue: ChainCatalogue, blockTimeMs: number | undefined): ChainCatalogue {
  if (blockTimeMs === undefined) return catalogue
  const devnet = getProfile(catalogue, 'devnet')
  const setting = /"block_time_ms": \d+/
  if (!devnet.config_files.some((f) => setting.test(f.template))) throw new Error('the devnet profile no longer sets "block_time_ms" in a config file')
  const faster = { ...devnet, config_files: devnet.config_files.map((f) => ({ ...f, template: f.template.replace(setting, `"block_time_ms": ${blockTimeMs}`) })) }
  return { ...catalogue, profiles: new Map([...catalogue.profiles, ['devnet', faster]]) }
}

export function startLifecycleWorker(db: Db, deps: LifecycleDeps, concurrency = 4, options: { rollouts?: boolean } = {}): WorkflowWorker {
  const lifecycle = registerLifecycleWorkflows(createWorkflowRegistry(), deps)
  const registry = options.rollouts ? registerRolloutWorkflows(lifecycle, deps) : lifecycle
  const worker = createWorkflowWorker({ db, registry, logger: deps.logger, leaseMs: 30_000, pollIntervalMs: 50, concurrency, ...(deps.now ? { now: deps.now } : {}) })
  worker.start()
  return worker
}

/** Waits for a workflow run to complete or fail, and returns it. */
export function untilRunFinished(db: Db, runId: string, timeoutMs = 90_000): Promise<WorkflowRun> {
  return waitFor(async () => {
    const run = await getRun(db, runId)
    return run && (run.status === 'completed' || run.status === 'failed') ? run : undefined
  }, `run ${runId} to finish`, timeoutMs, 100)
}
