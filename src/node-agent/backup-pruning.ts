/**
 * The agent's upgrade backups (`backups/`) are kept for 24 hours (spec), not until the next
 * upgrade: this prunes them when the agent starts and then every `intervalMs` (default hourly),
 * so one outlives its 24 h by at most an interval. A run that fails is logged and tried again at
 * the next one; runs never overlap.
 */
import type { Logger } from '../log.js'
import { pruneBackups, type StateDir } from './state-dir.js'

export const BACKUP_PRUNE_INTERVAL_MS = 3_600_000

export interface BackupPruningOptions {
  stateDir: StateDir
  logger: Logger
  now?: () => Date
  intervalMs?: number
}

export interface BackupPruning {
  /** One run now (shared with a run in progress); the names it removed. */
  prune(): Promise<string[]>
  stop(): Promise<void>
}

export function startBackupPruning(options: BackupPruningOptions): BackupPruning {
  const now = options.now ?? (() => new Date())
  const log = options.logger.child({ component: 'backup-pruning' })
  let running: Promise<string[]> | undefined
  const prune = (): Promise<string[]> => {
    running ??= pruneBackups(options.stateDir, now())
      .then((removed) => {
        if (removed.length > 0) log.info({ removed }, 'upgrade backups older than 24 hours deleted')
        return removed
      })
      .catch((err: unknown) => {
        log.warn({ err }, 'could not prune upgrade backups; trying again at the next interval')
        return []
      })
      .finally(() => {
        running = undefined
      })
    return running
  }
  void prune()
  const timer = setInterval(() => void prune(), options.intervalMs ?? BACKUP_PRUNE_INTERVAL_MS)
  timer.unref()
  return {
    prune,
    async stop() {
      clearInterval(timer)
      await running
    },
  }
}
