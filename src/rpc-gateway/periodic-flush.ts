/**
 * Counts kept in memory and written every `flushMs` (usage, upstream health): one write at a time
 * (a second caller waits for the running one, then writes what is left), and a last one on close.
 */
export interface PeriodicFlush {
  flush(): Promise<void>
  close(): Promise<void>
}

export function periodicFlush(flushOnce: () => Promise<void>, flushMs: number): PeriodicFlush {
  let flushing: Promise<void> | undefined
  function flush(): Promise<void> {
    const run = (flushing ?? Promise.resolve()).then(flushOnce)
    flushing = run.finally(() => {
      if (flushing === run) flushing = undefined
    })
    return run
  }
  const timer = setInterval(() => void flush(), flushMs)
  timer.unref()
  return {
    flush,
    async close() {
      clearInterval(timer)
      await flush()
    },
  }
}
