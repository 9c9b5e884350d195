import type { Logger } from '../log.js'

/**
 * Things a daemon opened, closed in reverse order: on a graceful stop, and when start-up fails
 * half-way so nothing (a pool, a listener, a connection) is left open.
 */
export class Resources {
  private readonly closers: Array<{ name: string; close: () => Promise<void> | void }> = []

  constructor(private readonly logger: Logger) {}

  add<T>(name: string, resource: T, close: (resource: T) => Promise<void> | void): T {
    this.closers.push({ name, close: () => close(resource) })
    return resource
  }

  async closeAll(): Promise<void> {
    for (const { name, close } of this.closers.splice(0).reverse()) {
      try {
        await close()
      } catch (err) {
        this.logger.error({ err, resource: name }, 'error while closing')
      }
    }
  }

  /** Runs start-up; on failure closes what was opened so far and rethrows. */
  async starting<T>(start: () => Promise<T>): Promise<T> {
    try {
      return await start()
    } catch (err) {
      await this.closeAll()
      throw err
    }
  }
}
