import os from 'node:os'
import type { Logger } from '../log.js'
import { notifySystemd } from './sd-notify.js'

export interface ShutdownOptions {
  /** Graceful stop: stop accepting work, stop consumers, drain in-flight work, close the database. */
  stop: () => Promise<void>
  timeoutMs: number
  logger: Logger
  /** Called once with 128 + signal number; `process.exit` in production. */
  exit?: (code: number) => void
  signals?: NodeJS.Signals[]
}

/**
 * The first SIGTERM/SIGINT starts one graceful stop; a repeated signal does not run it again.
 * The process exits with 128 + signal number whether the stop finished, failed or timed out.
 */
export function installShutdown(options: ShutdownOptions): { dispose(): void; readonly stopping: boolean } {
  const exit = options.exit ?? ((code: number) => process.exit(code))
  const signals = options.signals ?? ['SIGTERM', 'SIGINT']
  let stopping = false
  let exited = false
  const finish = (code: number) => {
    if (exited) return
    exited = true
    exit(code)
  }

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      options.logger.warn({ signal }, 'already stopping; waiting for the graceful stop to finish')
      return
    }
    stopping = true
    const code = 128 + (os.constants.signals[signal] ?? 15)
    options.logger.info({ signal, timeout_ms: options.timeoutMs }, 'stopping')
    // systemd shows the unit "deactivating" from here, not only once the process is gone.
    void notifySystemd('STOPPING=1', options.logger)
    const timer = setTimeout(() => {
      options.logger.error({ timeout_ms: options.timeoutMs }, 'graceful stop timed out; exiting')
      finish(code)
    }, options.timeoutMs)
    timer.unref()
    options.stop().then(
      () => {
        clearTimeout(timer)
        options.logger.info('stopped')
        finish(code)
      },
      (err: unknown) => {
        clearTimeout(timer)
        options.logger.error({ err }, 'error during graceful stop')
        finish(code)
      },
    )
  }

  for (const signal of signals) process.on(signal, onSignal)
  return {
    dispose() {
      for (const signal of signals) process.off(signal, onSignal)
    },
    get stopping() {
      return stopping
    },
  }
}
