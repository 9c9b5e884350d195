/**
 * Executes control-plane commands on the node host. Commands run one at a time; each has a
 * journal (`commands/<id>.json`) so a command sent twice runs once: a finished command returns
 * (or rethrows) its recorded outcome, an interrupted one runs again (an upgrade resumes after its
 * last journaled action; the other commands are idempotent and simply run again).
 */
import crypto from 'node:crypto'
import type { Logger } from 'pino'
import { commandPayloads, isCommandType, type CommandPayload, type CommandType } from '../agent-gateway/protocol.js'
import type { ReleasePublicKey } from '../artifacts/release-keys.js'
import type { StoredArtifactFetcher } from './artifact-fetch.js'
import { ensureInstalled, type FetchLike } from './artifacts.js'
import { backupToStore, restoreFromStore } from './backup.js'
import { exportChainKeys, prepareBackup, restoreChainKeys } from './bitcoin-node.js'
import { captureKeys, injectKeys, loadOrCreateAgentKey, untilKeyFilesWritten } from './keys.js'
import { open, type SealedBox } from '../secrets/sealed-box.js'
import type { ChainSupervisor, SupervisorStatus } from './supervisor.js'
import { runUpgrade, type ProgressReport, type UpgradeFaults } from './upgrade.js'
import {
  assertSafeSegment,
  CommandError,
  configFileTargets,
  configsHash,
  readCommandJournal,
  writeActiveDeployment,
  writeCommandJournal,
  writeConfigFiles,
  type CommandJournal,
  type StateDir,
} from './state-dir.js'

export { CommandError } from './state-dir.js'
export type { ProgressReport } from './upgrade.js'

export interface AgentCommand {
  id: string
  type: string
  payload: unknown
}

export interface ExecutorOptions {
  stateDir: StateDir
  supervisor: ChainSupervisor
  logger: Logger
  clock?: () => Date
  fetch?: FetchLike
  /** ARTIFACT_RELEASE_PUBLIC_KEYS: signed artifacts must verify against one (docs/artifacts.md). */
  releaseKeys?: readonly ReleasePublicKey[]
  /** AGENT_REQUIRE_SIGNED_ARTIFACTS: artifacts without a release signature are refused. */
  requireSignedArtifacts?: boolean
  /** Fetches stored artifacts from the agent-gateway (docs/artifacts.md). */
  storedArtifacts?: StoredArtifactFetcher
  /** Test-only: fault injection for the upgrade actions and their compensations. */
  faults?: UpgradeFaults
}

export interface Executor {
  /** Resolves with the command's result (JSON); rejects with a CommandError. */
  execute(command: AgentCommand, report: ProgressReport): Promise<unknown>
}

export function createExecutor(options: ExecutorOptions): Executor {
  const { stateDir, supervisor, logger } = options
  const clock = options.clock ?? (() => new Date())
  const inFlight = new Map<string, Promise<unknown>>()
  let queue: Promise<unknown> = Promise.resolve()

  /** The backup key, unsealed with this agent's key for one command and overwritten after it. */
  async function withBackupKey<T>(sealed: SealedBox, fn: (key: Uint8Array) => Promise<T>): Promise<T> {
    let key: Uint8Array
    try {
      key = open(sealed, loadOrCreateAgentKey(stateDir).secretKey)
    } catch (err) {
      throw new Error(`the backup key: ${(err as Error).message}; was it sealed to this agent's public key?`)
    }
    try {
      return await fn(key)
    } finally {
      key.fill(0)
    }
  }

  const handlers: { [T in CommandType]: (id: string, payload: CommandPayload<T>, report: ProgressReport) => Promise<unknown> } = {
    configure: async (_id, p, report) => {
      assertSafeSegment(p.binary_name, 'binary_name')
      assertSafeSegment(p.artifact.version, 'version')
      configFileTargets(stateDir, p.files)
      report.progress('configure', `installing ${p.binary_name} ${p.artifact.version}`)
      const installed = await ensureInstalled(stateDir, p.binary_name, p.artifact, {
        fetch: options.fetch,
        logger,
        releaseKeys: options.releaseKeys,
        requireSigned: options.requireSignedArtifacts,
        ...(options.storedArtifacts ? { stored: options.storedArtifacts } : {}),
      })
      report.progress('configure', installed ? `installed ${p.artifact.version}` : `${p.artifact.version} already installed`)
      writeConfigFiles(stateDir, p.files)
      writeActiveDeployment(stateDir, {
        binary_name: p.binary_name,
        version: p.artifact.version,
        sha256: p.artifact.sha256,
        run: p.run,
        ...(p.probe ? { probe: p.probe } : {}),
        crash_loop: p.crash_loop,
        config_version: p.config_version ?? null,
        configs_hash: configsHash(p.files),
        updated_at: clock().toISOString(),
      })
      supervisor.reload()
      report.progress('configure', `wrote ${p.files.length} config file(s) and the active deployment`)
      return { binary_version: p.artifact.version, config_version: p.config_version ?? null }
    },
    start: async () => {
      await supervisor.start()
      await restoreChainKeys(stateDir, supervisor.deployment?.probe, { logger })
      return processResult(supervisor.status())
    },
    stop: async () => {
      await supervisor.stop()
      return processResult(supervisor.status())
    },
    restart: async () => {
      await supervisor.restart()
      return processResult(supervisor.status())
    },
    inject_keys: async (_id, p) => injectKeys(stateDir, p.keys, loadOrCreateAgentKey(stateDir).secretKey),
    capture_keys: async (_id, p) => {
      await exportChainKeys(stateDir, p.exports ?? [], supervisor.deployment?.probe, { logger })
      await untilKeyFilesWritten(stateDir, p.paths)
      return captureKeys(stateDir, p.paths, p.recipient_public_key)
    },
    backup: async (_id, p, report) => {
      if (p.stop_chain) {
        report.progress('backup', 'stopping the chain for its last state')
        // Killed, the chain may have left what it writes as it exits half written (anvil's
        // state.json): no snapshot is better than one that does not start.
        if ((await supervisor.stop()) === 'killed') throw new Error('the chain did not exit within its stop grace period and was killed: its last state may be partial, so no backup was taken')
      } else await prepareBackup(stateDir, supervisor, logger)
      report.progress('backup', `writing backup ${p.backup_id}`)
      const size = await withBackupKey(p.key, (key) => backupToStore(stateDir, p.store_url, p.backup_id, key, clock(), logger))
      return p.stop_chain ? { ...size, chain_stopped: true } : size
    },
    restore: async (_id, p, report) => {
      report.progress('restore', `restoring backup ${p.backup_id}`)
      return withBackupKey(p.key, (key) => restoreFromStore(stateDir, supervisor, p.store_url, p.backup_id, key, logger))
    },
    upgrade: async (id, p, report) =>
      runUpgrade(
        {
          commandId: id,
          stateDir,
          supervisor,
          logger: logger.child({ command_id: id }),
          clock,
          fetch: options.fetch,
          releaseKeys: options.releaseKeys,
          requireSigned: options.requireSignedArtifacts,
          storedArtifacts: options.storedArtifacts,
          report,
          faults: options.faults,
          journal: {
            load: () => readCommandJournal(stateDir, id)?.upgrade,
            save: (upgrade) => {
              const journal = readCommandJournal(stateDir, id)
              if (!journal) throw new Error(`the journal of command ${id} disappeared`)
              writeCommandJournal(stateDir, { ...journal, upgrade, updated_at: clock().toISOString() })
            },
          },
        },
        p,
      ),
  }

  async function run(command: AgentCommand, type: CommandType, payload: unknown, report: ProgressReport): Promise<unknown> {
    const payloadHash = crypto.createHash('sha256').update(JSON.stringify(payload)).digest('hex')
    const log = logger.child({ command_id: command.id, command_type: type })
    const existing = readCommandJournal(stateDir, command.id)
    if (existing) {
      if (existing.type !== type || existing.payload_sha256 !== payloadHash) {
        throw new CommandError(`command id ${command.id} was already used for a different command`)
      }
      if (existing.status === 'completed') {
        log.info('command already completed; returning its recorded result')
        return existing.result
      }
      if (existing.status === 'failed') {
        log.info('command already failed; returning its recorded error')
        throw new CommandError(existing.error ?? 'failed', existing.result)
      }
      log.warn('command was interrupted; resuming it')
    } else {
      const now = clock().toISOString()
      writeCommandJournal(stateDir, { id: command.id, type, payload_sha256: payloadHash, status: 'running', started_at: now, updated_at: now })
    }
    const finish = (update: Pick<CommandJournal, 'status' | 'result' | 'error'>) => {
      const journal = readCommandJournal(stateDir, command.id)
      if (journal) writeCommandJournal(stateDir, { ...journal, ...update, updated_at: clock().toISOString() })
    }
    const handler = handlers[type] as (id: string, payload: unknown, report: ProgressReport) => Promise<unknown>
    try {
      const result = await handler(command.id, payload, report)
      finish({ status: 'completed', result })
      log.info('command completed')
      return result
    } catch (err) {
      const error = err instanceof CommandError ? err : new CommandError((err as Error).message)
      finish({ status: 'failed', error: error.message, ...(error.result === undefined ? {} : { result: error.result }) })
      log.warn({ error: error.message }, 'command failed')
      throw error
    }
  }

  return {
    execute(command, report) {
      if (!isCommandType(command.type)) return Promise.reject(new CommandError(`unknown command type ${JSON.stringify(command.type)}`))
      try {
        assertSafeSegment(command.id, 'command id')
      } catch (err) {
        return Promise.reject(new CommandError((err as Error).message))
      }
      const type = command.type
      const parsed = commandPayloads[type].safeParse(command.payload)
      if (!parsed.success) {
        const details = parsed.error.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : '(payload)'}: ${i.message}`).join('; ')
        return Promise.reject(new CommandError(`invalid ${type} payload: ${details}`))
      }
      const running = inFlight.get(command.id)
      if (running) return running
      const next = queue.then(() => run(command, type, parsed.data, report))
      queue = next.catch(() => undefined)
      inFlight.set(command.id, next)
      void next.then(
        () => inFlight.delete(command.id),
        () => inFlight.delete(command.id),
      )
      return next
    },
  }
}

function processResult(status: SupervisorStatus): { process_state: string; pid: number | null; version: string | null } {
  return { process_state: status.process_state, pid: status.pid ?? null, version: status.version ?? null }
}
