/**
 * Snapshots of a node's state (`data/`, `config/`, `active.json`) as a directory with a
 * `manifest.json`: to a `file://` store (backup / restore commands) and under `backups/` (the
 * upgrade's BackupCurrentState). Snapshots are taken live; chains that rewrite files in place
 * should be stopped first. `keys/` is never part of a snapshot (keys are injected separately);
 * whatever key files the chain keeps in `data/` (e.g. `data/nodekey`) are.
 *
 * A snapshot in the store leaves the host, so every file in it is encrypted under the backup key
 * the control plane sends sealed to this agent (src/secrets/backup-keys.ts); only the manifest is
 * plaintext. The upgrade's snapshot stays on the host, next to the live files it copies, and is
 * destroyed with the host.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Logger } from 'pino'
import { BACKUP_CIPHER, BACKUP_FORMAT, decryptBackupFile, encryptBackupFile } from '../secrets/backup-keys.js'
import type { ChainSupervisor } from './supervisor.js'
import { assertSafeSegment, readActiveDeployment, swapDirectory, writeFileAtomic, type StateDir } from './state-dir.js'

export interface SnapshotSize {
  size_bytes: number
  file_count: number
}

export interface SnapshotManifest extends SnapshotSize {
  created_at: string
  binary_name: string | null
  version: string | null
  /** Present when the files are encrypted (every snapshot in the store). */
  encryption?: { algorithm: typeof BACKUP_CIPHER; format: typeof BACKUP_FORMAT }
}

/** Copies one regular file (`relative`: its path in the snapshot); returns its plaintext size. */
type FileCopier = (source: string, target: string, relative: string, mode: number) => Promise<number>

const plainCopy: FileCopier = async (source, target, _relative, mode) => {
  await fsp.copyFile(source, target)
  await fsp.chmod(target, mode)
  return (await fsp.stat(target)).size
}

/** The backup key's copiers: the key is the backup's, `backupId` is bound into every file. */
function encrypting(key: Uint8Array, backupId: string): FileCopier {
  return (source, target, relative, mode) => encryptBackupFile(key, backupId, relative, source, target, mode)
}

function decrypting(key: Uint8Array, backupId: string): FileCopier {
  return (source, target, relative, mode) => decryptBackupFile(key, backupId, relative, source, target, mode)
}

/**
 * Copies a tree without following symlinks (they are copied as links). Files that vanish while
 * the copy runs (a live chain renaming its temporary files) are skipped. Asynchronous, so a large
 * data directory does not stall the agent's heartbeats.
 */
export async function copyTree(source: string, target: string, copy: FileCopier = plainCopy, prefix = ''): Promise<SnapshotSize> {
  const size: SnapshotSize = { size_bytes: 0, file_count: 0 }
  const walk = async (from: string, to: string, rel: string): Promise<void> => {
    const stat = await fsp.lstat(from)
    await fsp.mkdir(to, { recursive: true, mode: stat.mode & 0o7777 })
    for (const entry of await fsp.readdir(from, { withFileTypes: true })) {
      const src = path.join(from, entry.name)
      const dst = path.join(to, entry.name)
      const relative = rel === '' ? entry.name : `${rel}/${entry.name}`
      try {
        if (entry.isDirectory()) await walk(src, dst, relative)
        else if (entry.isSymbolicLink()) await fsp.symlink(await fsp.readlink(src), dst)
        else if (entry.isFile()) {
          size.size_bytes += await copy(src, dst, relative, (await fsp.stat(src)).mode & 0o7777)
          size.file_count += 1
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      }
    }
  }
  await walk(source, target, prefix)
  return size
}

/**
 * Writes a snapshot of `dir` to `target` (staged next to it, then renamed into place); with
 * `encryption`, every file under that backup's key.
 */
export async function snapshotState(dir: StateDir, target: string, now: Date, encryption?: { key: Uint8Array; backupId: string }): Promise<SnapshotManifest> {
  const staging = `${target}.staging-${crypto.randomBytes(6).toString('hex')}`
  await fsp.mkdir(staging, { recursive: true, mode: 0o700 })
  const copy = encryption ? encrypting(encryption.key, encryption.backupId) : plainCopy
  try {
    const data = await copyTree(dir.dataDir, path.join(staging, 'data'), copy, 'data')
    const config = await copyTree(dir.configDir, path.join(staging, 'config'), copy, 'config')
    const size: SnapshotSize = { size_bytes: data.size_bytes + config.size_bytes, file_count: data.file_count + config.file_count }
    if (fs.existsSync(dir.activeFile)) {
      size.size_bytes += await copy(dir.activeFile, path.join(staging, 'active.json'), 'active.json', 0o600)
      size.file_count += 1
    }
    const active = readActiveDeployment(dir)
    const manifest: SnapshotManifest = {
      created_at: now.toISOString(),
      binary_name: active?.binary_name ?? null,
      version: active?.version ?? null,
      ...size,
      ...(encryption ? { encryption: { algorithm: BACKUP_CIPHER, format: BACKUP_FORMAT } } : {}),
    }
    writeFileAtomic(path.join(staging, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`, 0o600)
    swapDirectory(target, staging)
    return manifest
  } catch (err) {
    await fsp.rm(staging, { recursive: true, force: true })
    throw err
  }
}

function storeDirectory(storeUrl: string): string {
  const url = new URL(storeUrl)
  if (url.protocol !== 'file:') throw new Error(`backup store ${url.protocol} is not supported (file:// only)`)
  return fileURLToPath(url)
}

export interface BackupResult extends SnapshotSize {
  backup_id: string
  location: string
}

/**
 * The `backup` command: a snapshot to `<store path>/<backup_id>/` (replacing one with that id),
 * every file encrypted under `key` (the backup key, already unsealed; the caller overwrites it).
 */
export async function backupToStore(dir: StateDir, storeUrl: string, backupId: string, key: Uint8Array, now: Date, logger: Logger): Promise<BackupResult> {
  const store = storeDirectory(storeUrl)
  fs.mkdirSync(store, { recursive: true, mode: 0o700 })
  const location = path.join(store, assertSafeSegment(backupId, 'backup id'))
  const manifest = await snapshotState(dir, location, now, { key, backupId })
  logger.info({ backup_id: backupId, location, size_bytes: manifest.size_bytes, file_count: manifest.file_count }, 'backup written')
  return { backup_id: backupId, location, size_bytes: manifest.size_bytes, file_count: manifest.file_count }
}

export interface RestoreResult extends SnapshotSize {
  backup_id: string
  /** What was replaced: `data` always; `config` and `active.json` only on an unconfigured node. */
  restored: string[]
}

/**
 * The `restore` command. Stops the chain process (it is not started again), then swaps the
 * snapshot's `data/` in. On a configured node the current `config/` and `active.json` stay:
 * configure already wrote this host's configuration (a migration restores onto a freshly
 * configured host) and a snapshot carries the chain's state. An unconfigured node gets the
 * snapshot's `config/` and `active.json` as well.
 *
 * Every file is decrypted under `key` into a staging directory first; a file that does not
 * authenticate (another node's key, an altered file) fails the restore before anything is
 * swapped in. A snapshot written without encryption is refused.
 */
export async function restoreFromStore(dir: StateDir, supervisor: ChainSupervisor, storeUrl: string, backupId: string, key: Uint8Array, logger: Logger): Promise<RestoreResult> {
  const store = storeDirectory(storeUrl)
  const source = path.join(store, assertSafeSegment(backupId, 'backup id'))
  if (!fs.existsSync(path.join(source, 'manifest.json'))) throw new Error(`backup ${backupId} not found in ${store}`)
  if (!fs.existsSync(path.join(source, 'data'))) throw new Error(`backup ${backupId} in ${store} has no data/ directory`)
  const manifest = JSON.parse(fs.readFileSync(path.join(source, 'manifest.json'), 'utf8')) as Partial<SnapshotManifest>
  if (manifest.encryption?.format !== BACKUP_FORMAT) throw new Error(`backup ${backupId} in ${store} is not encrypted (${BACKUP_FORMAT}); it is not restored`)
  const copy = decrypting(key, backupId)

  const withConfig = readActiveDeployment(dir) === undefined && fs.existsSync(path.join(source, 'active.json'))
  const staging = path.join(dir.root, `.restore-${crypto.randomBytes(6).toString('hex')}`)
  fs.mkdirSync(staging, { mode: 0o700 })
  try {
    const size = await copyTree(path.join(source, 'data'), path.join(staging, 'data'), copy, 'data')
    const restored = ['data']
    if (withConfig) {
      const config = await copyTree(path.join(source, 'config'), path.join(staging, 'config'), copy, 'config')
      size.size_bytes += config.size_bytes
      size.file_count += config.file_count
      size.size_bytes += await copy(path.join(source, 'active.json'), path.join(staging, 'active.json'), 'active.json', 0o600)
      size.file_count += 1
    }
    // Stopped only once everything decrypted: a wrong key leaves the running chain alone.
    await supervisor.stop()
    swapDirectory(dir.dataDir, path.join(staging, 'data'))
    if (withConfig) {
      swapDirectory(dir.configDir, path.join(staging, 'config'))
      fs.renameSync(path.join(staging, 'active.json'), dir.activeFile)
      restored.push('config', 'active.json')
      supervisor.reload()
    }
    logger.info({ backup_id: backupId, restored, size_bytes: size.size_bytes, file_count: size.file_count }, 'backup restored')
    return { backup_id: backupId, restored, ...size }
  } finally {
    await fsp.rm(staging, { recursive: true, force: true })
  }
}
