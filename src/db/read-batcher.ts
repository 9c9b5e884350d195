/**
 * Shared polling: many waiters each polling one row (a rollout batch's nodes following their
 * upgrade commands and health) would each take a pool connection every interval. Waiters instead
 * sleep to the same wall-clock grid (`sleepToGrid`), so they wake in the same turn of the event
 * loop, and their point reads (`ReadBatcher.get`) made in that turn go out as one
 * `WHERE key IN (…)` query.
 */
import type { Queryable } from './knex.js'

type Loader<V> = (db: Queryable, keys: string[]) => Promise<Map<string, V>>

interface Waiter<V> {
  resolve: (value: V | undefined) => void
  reject: (err: unknown) => void
}

/** Keys per query. */
const MAX_KEYS = 500

export class ReadBatcher<V> {
  #pending = new Map<string, Array<Waiter<V>>>()
  #scheduled = false

  constructor(
    private readonly db: Queryable,
    private readonly load: Loader<V>,
  ) {}

  /** The row of `key` as of a read made after this call, or undefined when there is none. */
  get(key: string): Promise<V | undefined> {
    return new Promise((resolve, reject) => {
      const waiters = this.#pending.get(key)
      if (waiters) waiters.push({ resolve, reject })
      else this.#pending.set(key, [{ resolve, reject }])
      if (this.#scheduled) return
      this.#scheduled = true
      // After the timers phase: every waiter woken by the same grid point has asked by then.
      setImmediate(() => void this.#flush())
    })
  }

  async #flush(): Promise<void> {
    const batch = this.#pending
    this.#pending = new Map()
    this.#scheduled = false
    const keys = [...batch.keys()]
    for (let i = 0; i < keys.length; i += MAX_KEYS) {
      const chunk = keys.slice(i, i + MAX_KEYS)
      try {
        const found = await this.load(this.db, chunk)
        for (const key of chunk) for (const waiter of batch.get(key) ?? []) waiter.resolve(found.get(key))
      } catch (err) {
        for (const key of chunk) for (const waiter of batch.get(key) ?? []) waiter.reject(err)
      }
    }
  }
}

const batchers = new WeakMap<Queryable, Map<Loader<unknown>, ReadBatcher<unknown>>>()

/** The batcher of `load` on `db`: one per pair, so only reads of the same kind on the same handle are merged. */
export function readBatcher<V>(db: Queryable, load: Loader<V>): ReadBatcher<V> {
  let byLoader = batchers.get(db)
  if (!byLoader) {
    byLoader = new Map()
    batchers.set(db, byLoader)
  }
  let batcher = byLoader.get(load as Loader<unknown>) as ReadBatcher<V> | undefined
  if (!batcher) {
    batcher = new ReadBatcher(db, load)
    byLoader.set(load as Loader<unknown>, batcher as ReadBatcher<unknown>)
  }
  return batcher
}

/**
 * Sleeps to the next multiple of `intervalMs` on the wall clock (at most `intervalMs`): pollers
 * with the same interval wake together. Resolves early when `signal` aborts.
 */
export function sleepToGrid(intervalMs: number, signal?: AbortSignal): Promise<void> {
  const wait = intervalMs - (Date.now() % intervalMs)
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, wait)
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        resolve()
      },
      { once: true },
    )
  })
}
