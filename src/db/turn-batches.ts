/**
 * Reads of one kind on one database handle, batched per turn of the event loop (the API key and
 * user lookups of every request): one query at a time, and the lookups that arrive while it runs
 * go together into the next. The first lookup waits for the end of the turn (setImmediate), so the
 * other requests read in that turn join it: a SQLite query runs synchronously, and without the wait
 * no two lookups would ever meet. A lookup is only answered by a query that started after it
 * arrived, so no answer is ever reused: a key revoked or a user disabled before a request came in
 * is seen by that request, on every process. Under load one query serves many requests, whose
 * per-statement cost (query building; on SQLite its implicit read transaction) was most of an
 * authenticated request's CPU beyond an unauthenticated one's.
 */
export interface Waiter<T> {
  resolve: (value: T) => void
  reject: (err: unknown) => void
}

export class TurnBatches<W extends Pick<Waiter<unknown>, 'reject'>> {
  private waiting: W[] = []
  private running = false

  /** `answer` resolves every waiter of a batch; when it throws, the ones left are rejected with its error. */
  constructor(private readonly answer: (batch: W[]) => Promise<void>) {}

  add(waiter: W): void {
    this.waiting.push(waiter)
    if (this.running) return
    this.running = true
    setImmediate(() => void this.drain())
  }

  private async drain(): Promise<void> {
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting
        this.waiting = []
        try {
          await this.answer(batch)
        } catch (err) {
          for (const waiter of batch) waiter.reject(err)
        }
      }
    } finally {
      this.running = false
    }
  }
}
