import crypto from 'node:crypto'
import os from 'node:os'
import { CronJob } from 'cron'
import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import { readLease, releaseLease, tryAcquireLease } from './lease.js'
import { createLeaseTrail } from './lease-trail.js'

export interface PeriodicJobOptions {
  name: string
  /** Six-field cron expression (seconds first), e.g. `0 * * * * *` for every minute. */
  cronTime: string
  /** How long one tick's lease lasts (renewed while the tick runs); keep it longer than the interval so the holder keeps it from tick to tick. */
  leaseMs: number
  /** About how often the cron fires: when a standby judges the holder gone (lease-trail.ts). */
  intervalMs?: number
  db: Db
  logger: Logger
  run: (now: Date) => Promise<void>
  now?: () => Date
  holder?: string
}

export interface PeriodicJob {
  /** Runs one tick now (if the lease is ours); resolves whether it ran. */
  tick(): Promise<boolean>
  stop(): Promise<void>
}

/**
 * Schedules `run` with `cron`; each tick first takes the job's database lease, so among several
 * replicas only the lease holder runs it, and a tick still running is never overlapped.
 */
export function schedulePeriodicJob(options: PeriodicJobOptions): PeriodicJob {
  const holder = options.holder ?? `${os.hostname()}:${process.pid}:${crypto.randomUUID().slice(0, 8)}`
  const now = options.now ?? (() => new Date())
  const log = options.logger.child({ job: options.name })
  const trail = createLeaseTrail({ logger: log, holder, leaseMs: options.leaseMs, intervalMs: options.intervalMs })
  let running: Promise<boolean> | undefined
  let renewal: NodeJS.Timeout | undefined
  let stopped = false

  const tick = (): Promise<boolean> => {
    if (stopped) return Promise.resolve(false)
    if (running) return running
    running = (async () => {
      try {
        const at = now()
        // Read for the operator's trail only; the acquisition below stays the one atomic step.
        const before = await readLease(options.db, options.name)
        const acquired = await tryAcquireLease(options.db, options.name, holder, options.leaseMs, at)
        trail.observe(before, acquired, at)
        if (!acquired) return false
        // Renewed while the tick runs, so a tick longer than the lease (a fleet-wide outage's
        // evaluation) keeps it and the lease can stay short: a killed holder's peer waits one lease.
        renewal = setInterval(() => {
          tryAcquireLease(options.db, options.name, holder, options.leaseMs, now()).then(
            (held) => held || log.warn('lease lost while running'),
            (err: unknown) => log.warn({ err }, 'could not renew lease'),
          )
        }, Math.max(100, Math.floor(options.leaseMs / 3)))
        await options.run(at)
        return true
      } catch (err) {
        log.error({ err }, 'periodic job failed')
        return false
      } finally {
        clearInterval(renewal)
        running = undefined
      }
    })()
    return running
  }

  const cron = CronJob.from({ cronTime: options.cronTime, onTick: () => void tick(), start: true })
  return {
    tick,
    async stop() {
      stopped = true
      await cron.stop()
      await running
      await releaseLease(options.db, options.name, holder).catch((err: unknown) => log.warn({ err }, 'could not release lease'))
    },
  }
}

/** What every job scheduled with `scheduleJobEvery` takes besides its work. */
export interface JobSchedule {
  db: Db
  logger: Logger
  now?: (() => Date) | undefined
  /** Lease holder name (default: host, pid and a random suffix). */
  holder?: string | undefined
  /** Overrides the cron expression derived from the interval (tests: one that never fires). */
  cronTime?: string | undefined
}

export interface JobEvery {
  name: string
  intervalMs: number
  /** Default: twice the interval and at least a minute, so the holder renews it on its next tick and keeps the job. */
  leaseMs?: number
  /** Given the tick's time and the job's logger (`component: name`). */
  run: (now: Date, logger: Logger) => Promise<void>
}

/** Runs `job.run` about every `job.intervalMs` on whichever replica holds the job's lease. */
export function scheduleJobEvery(schedule: JobSchedule, job: JobEvery): PeriodicJob {
  const logger = schedule.logger.child({ component: job.name })
  return schedulePeriodicJob({
    name: job.name,
    cronTime: schedule.cronTime ?? cronEvery(job.intervalMs),
    leaseMs: job.leaseMs ?? Math.max(2 * job.intervalMs, 60_000),
    intervalMs: job.intervalMs,
    db: schedule.db,
    logger,
    ...(schedule.now ? { now: schedule.now } : {}),
    ...(schedule.holder ? { holder: schedule.holder } : {}),
    run: (now) => job.run(now, logger),
  })
}

/**
 * A six-field cron expression firing about every `ms` (settings are durations such as 30s or
 * 5m; cron counts within the minute or hour, so an interval that does not divide it evenly
 * restarts at the next minute or hour).
 */
export function cronEvery(ms: number): string {
  if (ms < 60_000) return `*/${Math.max(1, Math.round(ms / 1_000))} * * * * *`
  if (ms < 3_600_000) return `0 */${Math.max(1, Math.round(ms / 60_000))} * * * *`
  return `0 0 */${Math.max(1, Math.min(23, Math.round(ms / 3_600_000)))} * * *`
}
