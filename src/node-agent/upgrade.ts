/**
 * The upgrade command: the spec's actions in order (BackupCurrentState, AcquireArtifact,
 * VerifyArtifact, StopNode, InstallArtifact, WriteConfigs, ReloadDaemon, StartNode), each
 * journaled once done, so an agent killed half-way resumes where it stopped. An action whose
 * effect is already in place is skipped. When an action fails, the completed ones are
 * compensated in reverse order; the first compensation that fails ends the rollback
 * (`failed_rollback`: what is left needs a person, and later compensations may depend on it).
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import { PHASE_OF_ACTION, UPGRADE_ACTIONS, type CommandPayload, type UpgradeAction, type UpgradeResult } from '../agent-gateway/protocol.js'
import type { ReleasePublicKey } from '../artifacts/release-keys.js'
import type { StoredArtifactFetcher } from './artifact-fetch.js'
import { acquireArtifact, installArtifact, isInstalled, verifyArtifact, verifyReleaseSignature, type FetchLike } from './artifacts.js'
import { snapshotState } from './backup.js'
import type { ChainSupervisor } from './supervisor.js'
import {
  assertSafeSegment,
  CommandError,
  configFileTargets,
  configsHash,
  pruneBackups,
  readActiveDeployment,
  swapDirectory,
  writeActiveDeployment,
  writeConfigFiles,
  type ActiveDeployment,
  type StateDir,
  type UpgradeJournal,
} from './state-dir.js'

/**
 * Test-only fault injection: fail an action as it begins, or fail an action's compensation.
 * Production wiring never sets it.
 */
export interface UpgradeFaults {
  failAction?: UpgradeAction
  failCompensation?: UpgradeAction
}

export interface ProgressReport {
  progress(phase: string, message: string): void
}

export interface UpgradeJournalStore {
  load(): UpgradeJournal | undefined
  save(journal: UpgradeJournal): void
}

export interface UpgradeDeps {
  commandId: string
  stateDir: StateDir
  supervisor: ChainSupervisor
  logger: Logger
  clock: () => Date
  fetch?: FetchLike
  /** ARTIFACT_RELEASE_PUBLIC_KEYS: a signed artifact must verify against one (VerifyArtifact). */
  releaseKeys?: readonly ReleasePublicKey[]
  /** AGENT_REQUIRE_SIGNED_ARTIFACTS: an unsigned artifact fails VerifyArtifact. */
  requireSigned?: boolean
  /** Fetches stored artifacts from the agent-gateway (AcquireArtifact). */
  storedArtifacts?: StoredArtifactFetcher
  report: ProgressReport
  journal: UpgradeJournalStore
  faults?: UpgradeFaults
}

type UpgradePayload = CommandPayload<'upgrade'>
type Outcome = { skipped: string } | undefined

/**
 * Runs (or resumes) the upgrade. Success returns a result with phase `starting`: the agent's
 * part is over and the node runs the new version; `verifying` and `completed` are the control
 * plane's (health validation). Failure throws a CommandError whose result has phase
 * `rolled_back` or `failed_rollback`.
 */
export async function runUpgrade(deps: UpgradeDeps, payload: UpgradePayload): Promise<UpgradeResult> {
  const { stateDir, report } = deps
  assertSafeSegment(payload.artifact.version, 'version')
  configFileTargets(stateDir, payload.config_files ?? [])
  let journal = deps.journal.load()
  if (!journal) {
    const previous = readActiveDeployment(stateDir)
    if (!previous) throw new CommandError('cannot upgrade an unconfigured node: no active deployment (send configure first)')
    // The agent supervises one chain binary: another binary's release must not replace it.
    if (payload.binary_name !== undefined && payload.binary_name !== previous.binary_name) {
      // Nothing was done, so nothing needs undoing: reported as rolled back, the node as it was.
      const untouched: UpgradeResult = { version: payload.artifact.version, previous_version: previous.version, phase: 'rolled_back', actions_done: [], actions_skipped: [], compensated: [] }
      throw new CommandError(`this node runs ${previous.binary_name}; it has no binary ${payload.binary_name} to upgrade`, untouched)
    }
    journal = { previous, actions_done: [], actions_skipped: [], compensated: [] }
    deps.journal.save(journal)
  }
  const run = new UpgradeRun(deps, payload, journal)
  if (journal.failure) return run.compensate()

  for (const action of UPGRADE_ACTIONS) {
    const phase = PHASE_OF_ACTION[action]
    if (journal.actions_done.includes(action) || journal.actions_skipped.includes(action)) {
      report.progress(phase, `${action}: already done before the agent restarted`)
      continue
    }
    report.progress(phase, `${action}`)
    let outcome: Outcome
    try {
      if (deps.faults?.failAction === action) throw new Error(`injected failure at ${action} (test fault)`)
      outcome = await run.perform(action)
    } catch (err) {
      journal.failure = { action, message: (err as Error).message }
      deps.journal.save(journal)
      deps.logger.error({ action, err }, 'upgrade action failed; compensating')
      await run.cleanUpFailed(action)
      return run.compensate()
    }
    if (outcome) {
      journal.actions_skipped.push(action)
      report.progress(phase, `${action} skipped: ${outcome.skipped}`)
    } else {
      journal.actions_done.push(action)
    }
    deps.journal.save(journal)
  }
  deps.logger.info({ version: payload.artifact.version, previous_version: journal.previous.version }, 'upgrade done')
  return {
    version: payload.artifact.version,
    previous_version: journal.previous.version,
    phase: 'starting',
    actions_done: journal.actions_done,
    actions_skipped: journal.actions_skipped,
    compensated: [],
  }
}

class UpgradeRun {
  readonly #backupDir: string

  constructor(
    readonly deps: UpgradeDeps,
    readonly payload: UpgradePayload,
    readonly journal: UpgradeJournal,
  ) {
    this.#backupDir = path.join(deps.stateDir.backupsDir, `upgrade-${assertSafeSegment(deps.commandId, 'command id')}`)
  }

  get #binaryName(): string {
    return this.journal.previous.binary_name
  }

  #current(): ActiveDeployment {
    const active = readActiveDeployment(this.deps.stateDir)
    if (!active) throw new Error('active.json disappeared during the upgrade')
    return active
  }

  #save(): void {
    this.deps.journal.save(this.journal)
  }

  async perform(action: UpgradeAction): Promise<Outcome> {
    const { stateDir, supervisor, clock } = this.deps
    const artifact = this.payload.artifact
    switch (action) {
      case 'BackupCurrentState': {
        const pruned = await pruneBackups(stateDir, clock())
        if (pruned.length > 0) this.deps.logger.info({ pruned }, 'pruned upgrade backups older than 24 h')
        await snapshotState(stateDir, this.#backupDir, clock())
        return undefined
      }
      case 'AcquireArtifact':
        if (await isInstalled(stateDir, this.#binaryName, artifact)) return { skipped: `version ${artifact.version} is already installed with this checksum` }
        this.journal.download = await acquireArtifact(stateDir, this.#binaryName, artifact, { fetch: this.deps.fetch, logger: this.deps.logger, ...(this.deps.storedArtifacts ? { stored: this.deps.storedArtifacts } : {}) })
        this.#save()
        return undefined
      case 'VerifyArtifact':
        if (!this.journal.download) return { skipped: `version ${artifact.version} is already installed with this checksum` }
        await verifyArtifact(this.journal.download, artifact.sha256)
        await verifyReleaseSignature(this.journal.download, this.#binaryName, artifact, this.deps.releaseKeys, this.deps.requireSigned)
        return undefined
      case 'StopNode':
        if (supervisor.status().process_state !== 'running') return { skipped: 'the chain process is not running' }
        await supervisor.stop()
        return undefined
      case 'InstallArtifact': {
        const installedBefore = await isInstalled(stateDir, this.#binaryName, artifact)
        if (!installedBefore) {
          if (!this.journal.download) throw new Error(`version ${artifact.version} is neither installed nor downloaded`)
          await installArtifact(stateDir, this.#binaryName, artifact.version, this.journal.download)
        }
        const current = this.#current()
        const next: ActiveDeployment = {
          ...current,
          version: artifact.version,
          sha256: artifact.sha256,
          run: this.payload.run ?? current.run,
          config_version: this.payload.config_version === undefined ? current.config_version : this.payload.config_version,
          updated_at: clock().toISOString(),
        }
        if (installedBefore && sameDeployment(current, next)) return { skipped: `version ${artifact.version} is already installed and active` }
        writeActiveDeployment(stateDir, next)
        return undefined
      }
      case 'WriteConfigs': {
        const files = this.payload.config_files
        if (!files || files.length === 0) return { skipped: 'the command carries no config files' }
        const hash = configsHash(files)
        const current = this.#current()
        if (current.configs_hash === hash) return { skipped: 'config files unchanged' }
        writeConfigFiles(stateDir, files, path.join(this.#backupDir, 'config-before'))
        writeActiveDeployment(stateDir, { ...current, configs_hash: hash, updated_at: clock().toISOString() })
        return undefined
      }
      case 'ReloadDaemon':
        supervisor.reload()
        return undefined
      case 'StartNode':
        await supervisor.start()
        return undefined
    }
  }

  /** Undoes what a failed action may have left half-done (it is not in actions_done). */
  async cleanUpFailed(action: UpgradeAction): Promise<void> {
    try {
      if (action === 'StartNode') await this.deps.supervisor.stop()
    } catch (err) {
      this.deps.logger.warn({ action, err }, 'cleaning up after the failed action did not work')
    }
  }

  async #undo(action: UpgradeAction): Promise<void> {
    const { stateDir, supervisor, clock } = this.deps
    const previous = this.journal.previous
    switch (action) {
      case 'StartNode':
        await supervisor.stop()
        return
      case 'ReloadDaemon':
        supervisor.reload(previous)
        return
      case 'WriteConfigs': {
        const before = path.join(this.#backupDir, 'config-before')
        if (!fs.existsSync(before)) throw new Error(`the previous config files are missing (${before})`)
        swapDirectory(stateDir.configDir, before)
        writeActiveDeployment(stateDir, { ...this.#current(), configs_hash: previous.configs_hash, updated_at: clock().toISOString() })
        return
      }
      case 'InstallArtifact':
        // The new release stays installed (a retry then skips the download); only active.json switches back.
        writeActiveDeployment(stateDir, {
          ...this.#current(),
          version: previous.version,
          sha256: previous.sha256,
          run: previous.run,
          config_version: previous.config_version,
          updated_at: clock().toISOString(),
        })
        return
      case 'StopNode':
        // active.json and config/ are the previous ones again by now (compensated above).
        supervisor.reload()
        await supervisor.start()
        return
      case 'AcquireArtifact':
        if (this.journal.download) fs.rmSync(this.journal.download, { force: true })
        return
      case 'VerifyArtifact':
      case 'BackupCurrentState':
        // Nothing to undo; the backup is kept for 24 h (spec).
        return
    }
  }

  /** Compensates the done actions not yet compensated, newest first, then throws the outcome. */
  async compensate(): Promise<never> {
    const { report, logger } = this.deps
    const journal = this.journal
    const failure = journal.failure ?? { action: 'StartNode', message: 'unknown failure' }
    report.progress('rollbacking', `${failure.action} failed: ${failure.message}; rolling back`)
    const pending = [...journal.actions_done].reverse().filter((a) => !journal.compensated.includes(a))
    for (const action of pending) {
      report.progress('rollbacking', `compensating ${action}`)
      try {
        if (this.deps.faults?.failCompensation === action) throw new Error(`injected compensation failure at ${action} (test fault)`)
        await this.#undo(action)
      } catch (err) {
        const compensationError = `${action}: ${(err as Error).message}`
        logger.error({ action, err }, 'upgrade compensation failed; manual intervention needed')
        throw new CommandError(
          `upgrade failed at ${failure.action} (${failure.message}) and compensating ${compensationError}; manual intervention needed`,
          this.#result('failed_rollback', compensationError),
        )
      }
      journal.compensated.push(action)
      this.#save()
    }
    logger.info({ version: journal.previous.version }, 'upgrade rolled back')
    throw new CommandError(
      `upgrade failed at ${failure.action} (${failure.message}); rolled back to version ${journal.previous.version}`,
      this.#result('rolled_back'),
    )
  }

  #result(phase: 'rolled_back' | 'failed_rollback', compensationError?: string): UpgradeResult {
    return {
      version: this.payload.artifact.version,
      previous_version: this.journal.previous.version,
      phase,
      actions_done: this.journal.actions_done,
      actions_skipped: this.journal.actions_skipped,
      compensated: this.journal.compensated,
      ...(compensationError ? { compensation_error: compensationError } : {}),
    }
  }
}

function sameDeployment(a: ActiveDeployment, b: ActiveDeployment): boolean {
  const strip = ({ updated_at: _ignored, ...rest }: ActiveDeployment) => rest
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b))
}
