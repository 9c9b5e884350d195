/**
 * The `node-agent` daemon: runs on a node's host, keeps its state in NODE_AGENT_STATE_DIR,
 * supervises the chain process and dials out to the agent-gateway.
 */
import fs from 'node:fs'
import type { z } from 'zod'
import { startBackupPruning } from '../src/node-agent/backup-pruning.js'
import { gatewayArtifactFetcher } from '../src/node-agent/artifact-fetch.js'
import { AgentClient } from '../src/node-agent/client.js'
import { createExecutor } from '../src/node-agent/executor.js'
import { Fence, fenceStopGraceMs } from '../src/node-agent/fence.js'
import { HostReporter } from '../src/node-agent/host.js'
import { loadOrCreateAgentKey } from '../src/node-agent/keys.js'
import { claimStateDir } from '../src/node-agent/lock.js'
import { openStateDir } from '../src/node-agent/state-dir.js'
import { ChainSupervisor } from '../src/node-agent/supervisor.js'
import { readSupersededRecord, retireSupersededHost } from '../src/node-agent/superseded.js'
import type { nodeAgentEnv } from '../src/config/env.js'
import { ConfigError } from '../src/errors.js'
import type { Logger } from '../src/log.js'

export const AGENT_VERSION = '0.1.0'

export type NodeAgentSettings = z.infer<typeof nodeAgentEnv>

export interface RunningNodeAgent {
  client: AgentClient
  supervisor: ChainSupervisor
  fence: Fence
  stop(): Promise<void>
}

/** This state directory's node was superseded before (superseded.ts): the agent must not start anything. */
export class SupersededError extends Error {}

function readSecretFile(variable: string, file: string, logger: Logger): string {
  let stat: fs.Stats
  try {
    stat = fs.statSync(file)
  } catch {
    throw new ConfigError([`${variable}=${JSON.stringify(file)}: file not found`])
  }
  if ((stat.mode & 0o077) !== 0) logger.warn({ file }, 'the token file is readable by other users; it should be mode 0600')
  const value = fs.readFileSync(file, 'utf8').trim()
  if (!value) throw new ConfigError([`${variable}=${JSON.stringify(file)}: file is empty`])
  return value
}

/**
 * `onSuperseded` is called once a gateway refused the agent and the host's copy of the node was
 * retired (superseded.ts): the caller exits 77. Throws SupersededError when that happened before.
 */
export async function startNodeAgent(settings: NodeAgentSettings, deps: { logger: Logger; onSuperseded: (reason: string) => void }): Promise<RunningNodeAgent> {
  const { logger } = deps
  const superseded = readSupersededRecord(settings.NODE_AGENT_STATE_DIR)
  if (superseded) throw new SupersededError(`this host's copy of the node was superseded at ${superseded.superseded_at} (${superseded.reason}); not starting`)
  const releaseKeys = settings.ARTIFACT_RELEASE_PUBLIC_KEYS
  const requireSigned = settings.AGENT_REQUIRE_SIGNED_ARTIFACTS ?? releaseKeys.length > 0
  if (requireSigned && releaseKeys.length === 0) {
    throw new ConfigError(['AGENT_REQUIRE_SIGNED_ARTIFACTS=true: no release public key to verify a signature with; set ARTIFACT_RELEASE_PUBLIC_KEYS'])
  }
  const token = readSecretFile('NODE_AGENT_TOKEN_FILE', settings.NODE_AGENT_TOKEN_FILE, logger)
  if (!fs.existsSync(settings.AGENT_GATEWAY_CA_FILE)) throw new ConfigError([`AGENT_GATEWAY_CA_FILE=${JSON.stringify(settings.AGENT_GATEWAY_CA_FILE)}: file not found`])
  const ca = fs.readFileSync(settings.AGENT_GATEWAY_CA_FILE)
  const stateDir = openStateDir(settings.NODE_AGENT_STATE_DIR)
  const claim = claimStateDir(stateDir)
  const keyPair = loadOrCreateAgentKey(stateDir)
  // Fenced from the start: a chain left wanted by the previous agent starts again only once a
  // gateway acknowledges this one (the node may have moved while this host was away).
  const supervisor = new ChainSupervisor({ stateDir, logger: logger.child({ component: 'supervisor' }), fenced: true })
  await supervisor.reapOrphan()
  let client: AgentClient | undefined
  const fence = new Fence({
    timeoutMs: settings.NODE_AGENT_FENCE_TIMEOUT,
    supervisor,
    stateDir,
    logger: logger.child({ component: 'fence' }),
    onFenced: () => client?.dropStream(),
  })
  fence.start()
  let retiring: Promise<void> | undefined
  const onFatal = (reason: string) => {
    retiring ??= (async () => {
      fence.stop()
      await retireSupersededHost({ stateDir, supervisor, logger, reason, graceMs: fenceStopGraceMs(settings.NODE_AGENT_FENCE_TIMEOUT) })
    })()
      .catch((err: unknown) => logger.error({ err }, 'could not remove the superseded node state'))
      .finally(() => deps.onSuperseded(reason))
  }
  const storedArtifacts = gatewayArtifactFetcher({
    target: settings.AGENT_GATEWAY_URL,
    ca,
    ...(settings.AGENT_GATEWAY_SERVER_NAME ? { serverName: settings.AGENT_GATEWAY_SERVER_NAME } : {}),
    nodeId: settings.NODE_AGENT_NODE_ID,
    token,
  })
  const executor = createExecutor({ stateDir, supervisor, logger, releaseKeys, requireSignedArtifacts: requireSigned, storedArtifacts })
  const backupPruning = startBackupPruning({ stateDir, logger })
  client = new AgentClient({
    target: settings.AGENT_GATEWAY_URL,
    ca,
    ...(settings.AGENT_GATEWAY_SERVER_NAME ? { serverName: settings.AGENT_GATEWAY_SERVER_NAME } : {}),
    nodeId: settings.NODE_AGENT_NODE_ID,
    token,
    agentVersion: AGENT_VERSION,
    publicKey: keyPair.publicKey,
    host: new HostReporter(stateDir, supervisor),
    runner: executor,
    logger,
    ...(settings.NODE_AGENT_HEARTBEAT_INTERVAL ? { heartbeatIntervalMs: settings.NODE_AGENT_HEARTBEAT_INTERVAL } : {}),
    ...(settings.NODE_AGENT_PROGRESS_CHECK_INTERVAL ? { progressCheckIntervalMs: settings.NODE_AGENT_PROGRESS_CHECK_INTERVAL } : {}),
    onFatal,
    onContact: (sentAt) => fence.contact(sentAt),
  })
  // Connection happens in the background: an agent started before its gateway keeps trying.
  void client.start()
  return {
    client,
    supervisor,
    fence,
    async stop() {
      fence.stop()
      await client.stop()
      await retiring
      await backupPruning.stop()
      await supervisor.close()
      claim.release()
    },
  }
}
