/**
 * The outbox relay: publishes committed outbox rows to the bus (docs/events.md, "Relay").
 *
 * One cycle: claim a batch of unpublished rows in id order with a lease (`claimed_by`,
 * `claimed_until`) in one short statement; publish them outside any transaction, awaiting the
 * bus's acknowledgement; mark the published ones. Several relays on one Postgres database skip
 * each other's claimed rows (`FOR UPDATE SKIP LOCKED`, then the lease). A relay that dies between
 * publishing and marking leaves its rows claimed until the lease ends; the next relay publishes
 * them again with the same message id, which JetStream drops as a duplicate, so each committed
 * event is stored in the stream once.
 */
import os from 'node:os'
import crypto from 'node:crypto'
import { affectedRows, lockForClaim } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import type { Logger } from '../log.js'
import type { EventBus } from './bus.js'
import { encodePayload } from './envelope.js'
import { onOutboxCommit, toOutboxRow, type OutboxRow } from './outbox.js'

export interface RelayMetrics {
  /** Rows published by one cycle and how long the cycle's publishing took. */
  published?(count: number, elapsedMs: number): void
  /** Rows that failed to publish in one cycle (they stay in the outbox). */
  failed?(count: number, error: Error): void
}

export interface OutboxRelayOptions {
  db: Db
  bus: EventBus
  logger: Logger
  /** Written to `claimed_by`; unique per relay instance by default. */
  relayId?: string
  now?: () => Date
  /** How often an idle relay looks for rows written by other processes (OUTBOX_POLL_INTERVAL). */
  pollIntervalMs?: number
  batchSize?: number
  /** How long a claim protects rows from other relays; must exceed a batch's publish time. */
  leaseMs?: number
  /** Bounded exponential back-off after a failed cycle. */
  backoffInitialMs?: number
  backoffMaxMs?: number
  /** Wake up after any commit in this process that wrote outbox rows (default true). */
  wakeOnCommit?: boolean
  metrics?: RelayMetrics
}

export interface RelayCycle {
  claimed: number
  published: number
  failed: number
}

const MAX_ERROR_TEXT = 1_000

export class OutboxRelay {
  readonly relayId: string
  private readonly db: Db
  private readonly bus: EventBus
  private readonly log: Logger
  private readonly now: () => Date
  private readonly pollIntervalMs: number
  private readonly batchSize: number
  private readonly leaseMs: number
  private readonly backoffInitialMs: number
  private readonly backoffMaxMs: number
  private readonly wakeOnCommit: boolean
  private readonly metrics: RelayMetrics

  private running = false
  private loopDone: Promise<void> | undefined
  private consecutiveFailures = 0
  private wakeRequested = false
  private interruptSleep: (() => void) | undefined
  private sleepIsWakeable = false
  private unsubscribeCommits: (() => void) | undefined
  private unsubscribeReconnect: (() => void) | undefined

  constructor(options: OutboxRelayOptions) {
    this.db = options.db
    this.bus = options.bus
    this.relayId = options.relayId ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`
    this.log = options.logger.child({ component: 'outbox-relay', relayId: this.relayId })
    this.now = options.now ?? (() => new Date())
    this.pollIntervalMs = options.pollIntervalMs ?? 500
    this.batchSize = options.batchSize ?? 100
    this.leaseMs = options.leaseMs ?? 60_000
    this.backoffInitialMs = options.backoffInitialMs ?? 500
    this.backoffMaxMs = options.backoffMaxMs ?? 30_000
    this.wakeOnCommit = options.wakeOnCommit ?? true
    this.metrics = options.metrics ?? {}
  }

  /** Starts the background loop (idempotent). */
  start(): void {
    if (this.running) return
    this.running = true
    if (this.wakeOnCommit) this.unsubscribeCommits = onOutboxCommit(() => this.wake())
    this.unsubscribeReconnect = this.bus.onReconnect(() => this.resume())
    this.loopDone = this.loop()
  }

  /** Stops the loop after the batch in flight is published and marked. */
  async stop(): Promise<void> {
    if (!this.running) return
    this.running = false
    this.unsubscribeCommits?.()
    this.unsubscribeCommits = undefined
    this.unsubscribeReconnect?.()
    this.unsubscribeReconnect = undefined
    this.interruptSleep?.()
    await this.loopDone
  }

  /**
   * Publish soon instead of at the next poll. Ignored while backing off after a failure, so a
   * busy producer cannot hammer a bus that is down.
   */
  wake(): void {
    this.wakeRequested = true
    if (this.sleepIsWakeable) this.interruptSleep?.()
  }

  /**
   * The bus is back: publish now, whatever the back-off had left (it only spares a bus that is
   * down), and start the back-off from the beginning if publishing still fails.
   */
  private resume(): void {
    if (!this.running) return
    this.log.info({ consecutiveFailures: this.consecutiveFailures }, 'bus reconnected; publishing the backlog now')
    this.consecutiveFailures = 0
    this.wakeRequested = true
    this.interruptSleep?.()
  }

  /** One cycle; returns the number of rows published. Failed rows stay for a later cycle. */
  async runOnce(): Promise<number> {
    return (await this.cycle()).published
  }

  /** One claim-publish-mark cycle. */
  async cycle(): Promise<RelayCycle> {
    const rows = await this.claim()
    if (rows.length === 0) return { claimed: 0, published: 0, failed: 0 }

    const started = performance.now()
    // Issued in id order on one connection, so the stream keeps that order when all succeed.
    const results = await Promise.allSettled(
      rows.map((row) =>
        this.bus.publish({ subject: row.subject, data: encodePayload(row.payload), messageId: row.messageId, headers: row.headers }),
      ),
    )
    const elapsedMs = performance.now() - started
    const publishedIds: number[] = []
    const failedIds: number[] = []
    let firstError: Error | undefined
    results.forEach((result, i) => {
      const id = (rows[i] as OutboxRow).id
      if (result.status === 'fulfilled') {
        publishedIds.push(id)
      } else {
        failedIds.push(id)
        firstError ??= result.reason instanceof Error ? result.reason : new Error(String(result.reason))
      }
    })

    if (publishedIds.length > 0) {
      await markPublished(this.db, publishedIds, this.now())
      this.metrics.published?.(publishedIds.length, elapsedMs)
    }
    if (failedIds.length > 0 && firstError) {
      await this.releaseFailed(failedIds, firstError)
      this.metrics.failed?.(failedIds.length, firstError)
      this.log.warn(
        { err: firstError, failed: failedIds.length, published: publishedIds.length },
        'outbox rows not published; they stay in the outbox and are retried',
      )
    }
    return { claimed: rows.length, published: publishedIds.length, failed: failedIds.length }
  }

  private async loop(): Promise<void> {
    this.log.info({ pollIntervalMs: this.pollIntervalMs, batchSize: this.batchSize }, 'outbox relay started')
    while (this.running) {
      this.wakeRequested = false
      let failed = false
      let more = false
      try {
        const result = await this.cycle()
        failed = result.failed > 0
        more = !failed && result.claimed === this.batchSize
      } catch (err) {
        failed = true
        this.log.error({ err }, 'outbox relay cycle failed')
      }
      if (failed) {
        this.consecutiveFailures++
        await this.sleep(this.backoffDelay(), false)
      } else {
        if (this.consecutiveFailures > 0) this.log.info('outbox relay publishing again')
        this.consecutiveFailures = 0
        if (!more && !this.wakeRequested) await this.sleep(this.pollIntervalMs, true)
      }
    }
    this.log.info('outbox relay stopped')
  }

  private backoffDelay(): number {
    const exp = Math.min(this.backoffMaxMs, this.backoffInitialMs * 2 ** Math.min(this.consecutiveFailures - 1, 30))
    // Jitter keeps several relays from retrying in lock-step.
    return Math.round(exp * (0.8 + 0.2 * Math.random()))
  }

  private sleep(ms: number, wakeable: boolean): Promise<void> {
    if (!this.running) return Promise.resolve()
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined = undefined
      const done = (): void => {
        clearTimeout(timer)
        this.interruptSleep = undefined
        this.sleepIsWakeable = false
        resolve()
      }
      timer = setTimeout(done, ms)
      this.sleepIsWakeable = wakeable
      this.interruptSleep = done
    })
  }

  /** Claims the oldest unclaimed (or lease-expired) unpublished rows in one statement. */
  private async claim(): Promise<OutboxRow[]> {
    const now = this.now()
    const claimable = lockForClaim(
      this.db,
      this.db('outbox')
        .select('id')
        .whereNull('published_at')
        .andWhere((q) => q.whereNull('claimed_until').orWhere('claimed_until', '<=', now))
        .orderBy('id')
        .limit(this.batchSize),
    )
    const raw = (await this.db('outbox')
      .update({ claimed_by: this.relayId, claimed_until: new Date(now.getTime() + this.leaseMs) })
      .whereIn('id', claimable)
      .returning('*')) as Record<string, unknown>[]
    return raw.map(toOutboxRow).sort((a, b) => a.id - b.id)
  }

  private async releaseFailed(ids: number[], error: Error): Promise<void> {
    // Only rows still claimed by this relay: another relay may have taken over after our lease.
    await this.db('outbox')
      .whereIn('id', ids)
      .where('claimed_by', this.relayId)
      .whereNull('published_at')
      .update({
        attempts: this.db.raw('attempts + 1'),
        last_error: error.message.slice(0, MAX_ERROR_TEXT),
        claimed_by: null,
        claimed_until: null,
      })
  }
}

/** Marks rows published (whoever claimed them: a published row is published). */
export async function markPublished(db: Queryable, ids: readonly number[], publishedAt: Date): Promise<number> {
  const result = await db('outbox')
    .whereIn('id', ids)
    .whereNull('published_at')
    .update({ published_at: publishedAt, claimed_by: null, claimed_until: null })
  return affectedRows(result)
}

/** Housekeeping: deletes rows published before `olderThan`; returns how many. */
export async function purgePublished(db: Queryable, olderThan: Date): Promise<number> {
  const result = await db('outbox').whereNotNull('published_at').where('published_at', '<', olderThan).del()
  return affectedRows(result)
}
