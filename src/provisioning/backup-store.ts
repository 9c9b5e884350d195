/**
 * The backup store's lifetime rules (spec: "The per-node backup is kept for 24 hours";
 * termination: "backups are deleted"). The store is the `file://` directory the agents' backup
 * command writes `<node id>/` into (staged as `<node id>.staging-<random>/`, then renamed).
 *
 * - `deleteNodeBackups`: termination removes the node's snapshot and any staging left over, then
 *   checks nothing of it is left.
 * - `purgeBackups`, run by the periodic job `backup-purge` (orchestrator, under a database lease):
 *   removes every entry created 24 h or more before `now` (the manifest's `created_at`, else the
 *   directory's modification time), and every entry of a node that has no data key any more (a
 *   terminated node whose delete failed: its backup no longer decrypts anyway).
 *
 * A purge that dies half-way leaves whole entries or none (each is one `rm -r`); the next run
 * finishes the job. Entries the store holds that are not a node's are left alone.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { isUuid } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'

export const BACKUP_PURGE_JOB = 'backup-purge'
/** Spec: the per-node backup is kept for 24 hours. */
export const BACKUP_RETENTION_MS = 24 * 3_600_000
/** Every 5 minutes: a backup outlives its 24 h by at most that. */
const PURGE_INTERVAL_MS = 5 * 60_000

export function backupStoreDirectory(storeUrl: string): string {
  const url = new URL(storeUrl)
  if (url.protocol !== 'file:') throw new Error(`backup store ${url.protocol} is not supported (file:// only)`)
  return fileURLToPath(url)
}

/** The node a store entry belongs to: `<node id>` or `<node id>.staging-<random>`. */
function entryNode(name: string): string | undefined {
  const id = name.split('.staging-')[0] ?? ''
  return isUuid(id) ? id.toLowerCase() : undefined
}

function entriesOf(store: string): string[] {
  try {
    return fs.readdirSync(store).sort()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  }
}

/** Deletes the node's backups from the store; throws when some are still there afterwards. Returns the entries removed. */
export async function deleteNodeBackups(storeUrl: string, nodeId: string): Promise<string[]> {
  const store = backupStoreDirectory(storeUrl)
  const mine = entriesOf(store).filter((name) => entryNode(name) === nodeId.toLowerCase())
  for (const name of mine) await fs.promises.rm(path.join(store, name), { recursive: true, force: true })
  const left = entriesOf(store).filter((name) => entryNode(name) === nodeId.toLowerCase())
  if (left.length > 0) throw new Error(`backups of node ${nodeId} are still in the store: ${left.join(', ')}`)
  return mine
}

function createdAt(entry: string): Date {
  try {
    const manifest = JSON.parse(fs.readFileSync(path.join(entry, 'manifest.json'), 'utf8')) as { created_at?: unknown }
    const at = typeof manifest.created_at === 'string' ? new Date(manifest.created_at) : undefined
    if (at && !Number.isNaN(at.getTime())) return at
  } catch {
    // No manifest (a staging directory) or an unreadable one: the directory's own time.
  }
  return fs.statSync(entry).mtime
}

export interface BackupPurgeResult {
  /** Entries removed for their age. */
  expired: string[]
  /** Entries removed because their node has no data key any more. */
  orphaned: string[]
}

export async function purgeBackups(db: Queryable, storeUrl: string, now: Date, retentionMs = BACKUP_RETENTION_MS): Promise<BackupPurgeResult> {
  const store = backupStoreDirectory(storeUrl)
  const entries = entriesOf(store)
    .map((name) => ({ name, node: entryNode(name) }))
    .filter((e): e is { name: string; node: string } => e.node !== undefined)
  const result: BackupPurgeResult = { expired: [], orphaned: [] }
  if (entries.length === 0) return result
  const nodes = [...new Set(entries.map((e) => e.node))]
  const keyed = new Set<string>()
  for (let i = 0; i < nodes.length; i += 500) {
    const ids = (await db('node_data_keys').whereIn('node_id', nodes.slice(i, i + 500)).pluck('node_id')) as string[]
    for (const id of ids) keyed.add(id.toLowerCase())
  }
  for (const { name, node } of entries) {
    const entry = path.join(store, name)
    let reason: keyof BackupPurgeResult | undefined
    try {
      if (!keyed.has(node)) reason = 'orphaned'
      else if (now.getTime() - createdAt(entry).getTime() >= retentionMs) reason = 'expired'
    } catch (err) {
      // Removed meanwhile (a termination, a newer backup replacing it): nothing to do.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
      throw err
    }
    if (!reason) continue
    await fs.promises.rm(entry, { recursive: true, force: true })
    result[reason].push(name)
  }
  return result
}

export interface BackupPurgeSchedule extends JobSchedule {
  storeUrl: string
  retentionMs?: number
}

/** Runs `purgeBackups` every 5 minutes on whichever orchestrator holds the lease. */
export function scheduleBackupPurge(options: BackupPurgeSchedule): PeriodicJob {
  return scheduleJobEvery(options, {
    name: BACKUP_PURGE_JOB,
    intervalMs: PURGE_INTERVAL_MS,
    leaseMs: 15 * 60_000,
    run: async (now, logger) => {
      const result = await purgeBackups(options.db, options.storeUrl, now, options.retentionMs)
      if (result.expired.length + result.orphaned.length > 0) logger.info(result, 'backups purged')
    },
  })
}
