import { afterEach, describe, expect, it, vi } from 'vitest'
import { installShutdown } from '../../../src/daemon/shutdown.js'
import { createLogger } from '../../../src/log.js'

const logger = createLogger({ level: 'silent' })

describe('installShutdown', () => {
  const disposers: Array<() => void> = []
  afterEach(() => {
    disposers.splice(0).forEach((d) => d())
    vi.useRealTimers()
  })

  it('runs the graceful stop once and exits with 128 + signal number', async () => {
    let stops = 0
    let release!: () => void
    const exit = vi.fn()
    const handle = installShutdown({
      logger,
      timeoutMs: 10_000,
      exit,
      signals: ['SIGUSR2'],
      stop: () => {
        stops++
        return new Promise<void>((resolve) => (release = resolve))
      },
    })
    disposers.push(handle.dispose)

    process.emit('SIGUSR2', 'SIGUSR2')
    process.emit('SIGUSR2', 'SIGUSR2')
    expect(stops).toBe(1)
    expect(handle.stopping).toBe(true)
    expect(exit).not.toHaveBeenCalled()
    release()
    await vi.waitFor(() => expect(exit).toHaveBeenCalledTimes(1))
    expect(exit).toHaveBeenCalledWith(128 + 12)
  })

  it('exits with the signal status when the stop hangs past its deadline', async () => {
    vi.useFakeTimers()
    const exit = vi.fn()
    const handle = installShutdown({ logger, timeoutMs: 5_000, exit, signals: ['SIGUSR2'], stop: () => new Promise(() => {}) })
    disposers.push(handle.dispose)
    process.emit('SIGUSR2', 'SIGUSR2')
    await vi.advanceTimersByTimeAsync(4_999)
    expect(exit).not.toHaveBeenCalled()
    await vi.advanceTimersByTimeAsync(1)
    expect(exit).toHaveBeenCalledWith(140)
  })

  it('still exits, once, when the stop fails', async () => {
    const exit = vi.fn()
    const handle = installShutdown({ logger, timeoutMs: 1_000, exit, signals: ['SIGUSR2'], stop: async () => Promise.reject(new Error('db close failed')) })
    disposers.push(handle.dispose)
    process.emit('SIGUSR2', 'SIGUSR2')
    await vi.waitFor(() => expect(exit).toHaveBeenCalledTimes(1))
    expect(exit).toHaveBeenCalledWith(140)
  })
})
