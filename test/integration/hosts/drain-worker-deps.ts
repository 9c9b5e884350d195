/**
 * An orchestrator's lifecycle workflow worker for drains that wait on nodes that cannot move
 * (drain-wait.test.ts and its child drain-worker.ts): the real host-drain workflow and `ssh`
 * provider; no agent is started, so the agent bootstrap names no gateway. `leaseMs` short: a
 * killed worker's runs are taken over soon.
 */
import crypto from 'node:crypto'
import { pathToFileURL } from 'node:url'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { DEFAULT_INSTANCE_TYPES } from '../../../src/hosts/instance-types.js'
import { createSshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import { createLogger } from '../../../src/log.js'
import { registerLifecycleWorkflows } from '../../../src/provisioning/index.js'
import { SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { createWorkflowRegistry, createWorkflowWorker, type WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'

/** How often the drain looks again at the node it waits for. */
export const DRAIN_POLL_MS = 50

export async function startDrainWorker(db: Db, owner: string): Promise<{ worker: WorkflowWorker; stop(): Promise<void> }> {
  const quiet = createLogger({ level: 'silent' })
  const pool = createSshPool({})
  const provider = new SshInfrastructureProvider({ db, pool, keys: fileSshKeyStore(tempDir('nodeplane-drain-keys-')), logger: quiet, instanceTypes: DEFAULT_INSTANCE_TYPES, placementWaitMs: 1_000, placementRetryIntervalMs: 100 })
  const deps = {
    db,
    logger: quiet,
    chains: staticChainSource(await loadChainCatalogue(defaultConfigDir())),
    masterKey: LocalFileMasterKey.fromBytes(crypto.randomBytes(32)),
    providers: new Map([[provider.name, provider]]),
    agentBootstrap: { gatewayTarget: '127.0.0.1:1', caPem: '' },
    backupStoreUrl: pathToFileURL(tempDir('nodeplane-drain-backups-')).href,
    migrationCooldownMs: 3_600_000,
    fenceTimeoutMs: 3_000,
    agentReadyWaitMs: 30_000,
    commandTimeoutMs: 30_000,
    pollIntervalMs: 50,
    drainPollIntervalMs: DRAIN_POLL_MS,
  }
  const worker = createWorkflowWorker({ db, registry: registerLifecycleWorkflows(createWorkflowRegistry(), deps), logger: quiet, owner, leaseMs: 1_500, pollIntervalMs: 50 })
  worker.start()
  return {
    worker,
    async stop() {
      await worker.stop()
      await pool.close()
    },
  }
}
