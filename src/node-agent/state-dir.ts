/**
 * The node agent's state directory: one per node host, everything the agent keeps on disk.
 *
 *   agent-key              X25519 secret key the control plane seals keys to (0600, created on first use)
 *   active.json            the active deployment (what the supervisor runs), written atomically
 *   chain.pid              pid of the chain process the agent started (to reap it after an agent crash)
 *   releases/<v>/<binary>  installed artifacts
 *   config/                rendered config files (replaced as a whole by configure / upgrade)
 *   keys/                  injected keys (dir 0700, files 0600)
 *   data/                  the chain's data directory
 *   backups/               upgrade backups, pruned after 24 h
 *   downloads/             artifacts being acquired
 *   commands/<id>.json     one journal per command (dedup and upgrade resume)
 *
 * Every path that comes from a payload is relative and is resolved and checked to stay inside
 * its directory, symlinks included.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { crashLoopSpec, probeSpec, runSpec, sha256Hex, UPGRADE_ACTIONS, type ConfigFile, type CommandType, type UpgradeAction } from '../agent-gateway/protocol.js'

export const BACKUP_RETENTION_MS = 24 * 60 * 60 * 1000

export interface StateDir {
  readonly root: string
  readonly agentKeyFile: string
  readonly activeFile: string
  readonly pidFile: string
  readonly releasesDir: string
  readonly configDir: string
  readonly keysDir: string
  readonly dataDir: string
  readonly backupsDir: string
  readonly downloadsDir: string
  readonly commandsDir: string
}

/** Creates the layout if missing (the root and `keys/` 0700) and returns its absolute paths. */
export function openStateDir(root: string): StateDir {
  const abs = path.resolve(root)
  fs.mkdirSync(abs, { recursive: true, mode: 0o700 })
  const dir: StateDir = {
    root: abs,
    agentKeyFile: path.join(abs, 'agent-key'),
    activeFile: path.join(abs, 'active.json'),
    pidFile: path.join(abs, 'chain.pid'),
    releasesDir: path.join(abs, 'releases'),
    configDir: path.join(abs, 'config'),
    keysDir: path.join(abs, 'keys'),
    dataDir: path.join(abs, 'data'),
    backupsDir: path.join(abs, 'backups'),
    downloadsDir: path.join(abs, 'downloads'),
    commandsDir: path.join(abs, 'commands'),
  }
  for (const d of [dir.releasesDir, dir.configDir, dir.dataDir, dir.downloadsDir]) fs.mkdirSync(d, { recursive: true, mode: 0o755 })
  // Backups hold chain data (node keys included) and journals hold command results.
  for (const d of [dir.keysDir, dir.backupsDir, dir.commandsDir]) {
    fs.mkdirSync(d, { recursive: true, mode: 0o700 })
    fs.chmodSync(d, 0o700)
  }
  return dir
}

export class UnsafePathError extends Error {
  override readonly name = 'UnsafePathError'
}

function isInside(base: string, target: string): boolean {
  const rel = path.relative(base, target)
  return rel !== '' && rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel)
}

/**
 * `base/relative`, refusing absolute paths, `..` escapes and symlinks (in any existing part of
 * the path) that lead outside `base`. The last component may be a symlink only if it points
 * inside; writers replace it by rename rather than follow it.
 */
export function resolveInside(base: string, relative: string, what = 'path'): string {
  if (relative.length === 0 || path.isAbsolute(relative) || relative.includes('\0')) {
    throw new UnsafePathError(`${what} ${JSON.stringify(relative)} must be a relative path`)
  }
  const target = path.resolve(base, relative)
  if (!isInside(base, target)) throw new UnsafePathError(`${what} ${JSON.stringify(relative)} leads outside ${base}`)
  const realBase = fs.realpathSync(base)
  let existing = target
  while (!lexists(existing)) existing = path.dirname(existing)
  let real: string
  try {
    real = fs.realpathSync(existing)
  } catch {
    throw new UnsafePathError(`${what} ${JSON.stringify(relative)} goes through a dangling symlink`)
  }
  if (real !== realBase && !isInside(realBase, real)) {
    throw new UnsafePathError(`${what} ${JSON.stringify(relative)} leads outside ${base} through a symlink`)
  }
  return target
}

function lexists(p: string): boolean {
  try {
    fs.lstatSync(p)
    return true
  } catch {
    return false
  }
}

/** A single path component used as a directory or file name (versions, binary names, ids). */
export function assertSafeSegment(value: string, what: string): string {
  if (!/^[A-Za-z0-9._+-]{1,128}$/.test(value) || value === '.' || value === '..') {
    throw new UnsafePathError(`${what} ${JSON.stringify(value)} must be letters, digits and . _ + - (not . or ..)`)
  }
  return value
}

/**
 * Writes through a temporary file in the same directory and renames it into place. The
 * temporary file is created with `mode` already set, so a 0600 file is never readable by
 * others, not even while it is being written.
 */
export function writeFileAtomic(file: string, content: string | Uint8Array, mode = 0o644): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${crypto.randomBytes(6).toString('hex')}.tmp`)
  const fd = fs.openSync(tmp, 'wx', mode)
  try {
    try {
      fs.writeFileSync(fd, content)
      fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
    // The umask may have cleared bits the caller asked for (e.g. 0644 under umask 077).
    fs.chmodSync(tmp, mode)
    fs.renameSync(tmp, file)
  } catch (err) {
    fs.rmSync(tmp, { force: true })
    throw err
  }
}

// ---- active.json ----

export const activeDeployment = z.object({
  binary_name: z.string().min(1),
  version: z.string().min(1),
  sha256: sha256Hex,
  run: runSpec,
  probe: probeSpec.optional(),
  crash_loop: crashLoopSpec,
  config_version: z.string().nullable(),
  /** configsHash() of the config files last written, to skip an upgrade's unchanged configs. */
  configs_hash: z.string().nullable(),
  updated_at: z.string(),
})
export type ActiveDeployment = z.infer<typeof activeDeployment>

export function readActiveDeployment(dir: StateDir): ActiveDeployment | undefined {
  let raw: string
  try {
    raw = fs.readFileSync(dir.activeFile, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  const parsed = activeDeployment.safeParse(JSON.parse(raw))
  if (!parsed.success) throw new Error(`${dir.activeFile} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`)
  return parsed.data
}

export function writeActiveDeployment(dir: StateDir, active: ActiveDeployment): void {
  writeFileAtomic(dir.activeFile, `${JSON.stringify(activeDeployment.parse(active), null, 2)}\n`, 0o644)
}

/** `releases/<version>/<binary_name>` (both checked to be single path components). */
export function releaseBinaryPath(dir: StateDir, binaryName: string, version: string): string {
  return path.join(dir.releasesDir, assertSafeSegment(version, 'version'), assertSafeSegment(binaryName, 'binary name'))
}

// ---- config files ----

/** A stable hash over the config files (paths, modes, contents), independent of their order. */
export function configsHash(files: readonly ConfigFile[]): string {
  const hash = crypto.createHash('sha256')
  for (const f of [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    hash.update(JSON.stringify([f.path, f.mode ?? 0o644, f.content]))
    hash.update('\n')
  }
  return hash.digest('hex')
}

/** Where each config file goes; throws for a path that is not under `config/`. */
export function configFileTargets(dir: StateDir, files: readonly ConfigFile[]): string[] {
  return files.map((f) => {
    const target = resolveInside(dir.root, f.path, 'config file path')
    if (!isInside(dir.configDir, target)) {
      throw new UnsafePathError(`config file path ${JSON.stringify(f.path)} must be under config/ (e.g. config/node.json)`)
    }
    return target
  })
}

/**
 * Replaces `config/` as a whole with `files` (paths relative to the state directory, each under
 * `config/`, e.g. `config/devnet.json`): the files are written to a staging directory that is
 * then swapped in, so the chain never sees a half-written set. The previous `config/` is moved
 * to `keepPreviousAt` when given (unless something is already there: a re-run must not
 * overwrite the original), otherwise deleted.
 */
export function writeConfigFiles(dir: StateDir, files: readonly ConfigFile[], keepPreviousAt?: string): void {
  const targets = configFileTargets(dir, files)
  const staging = path.join(dir.root, `.config-staging-${crypto.randomBytes(6).toString('hex')}`)
  fs.mkdirSync(staging, { mode: 0o755 })
  try {
    files.forEach((f, i) => {
      const staged = path.join(staging, path.relative(dir.configDir, targets[i] as string))
      fs.mkdirSync(path.dirname(staged), { recursive: true, mode: 0o755 })
      writeFileAtomic(staged, f.content, f.mode ?? 0o644)
    })
    swapDirectory(dir.configDir, staging, keepPreviousAt)
  } catch (err) {
    fs.rmSync(staging, { recursive: true, force: true })
    throw err
  }
}

/**
 * Puts `replacement` at `target` by two renames; the old `target` goes to `keepPreviousAt`
 * (if given and free) or is deleted.
 */
export function swapDirectory(target: string, replacement: string, keepPreviousAt?: string): void {
  const aside = `${target}.old-${crypto.randomBytes(6).toString('hex')}`
  const hadTarget = lexists(target)
  if (hadTarget) fs.renameSync(target, aside)
  try {
    fs.renameSync(replacement, target)
  } catch (err) {
    if (hadTarget) fs.renameSync(aside, target)
    throw err
  }
  if (!hadTarget) return
  if (keepPreviousAt && !lexists(keepPreviousAt)) {
    fs.mkdirSync(path.dirname(keepPreviousAt), { recursive: true, mode: 0o700 })
    fs.renameSync(aside, keepPreviousAt)
  } else {
    fs.rmSync(aside, { recursive: true, force: true })
  }
}

// ---- command journal ----

export type JournalStatus = 'running' | 'completed' | 'failed'

/** What an upgrade has done so far; written after every action and every compensation. */
export interface UpgradeJournal {
  /** The active deployment before the upgrade (what compensation returns to). */
  previous: ActiveDeployment
  actions_done: UpgradeAction[]
  actions_skipped: UpgradeAction[]
  compensated: UpgradeAction[]
  /** Set when an action failed: compensation is under way (or resumes after a restart). */
  failure?: { action: UpgradeAction; message: string }
  download?: string
}

export interface CommandJournal {
  id: string
  type: CommandType
  /** SHA-256 of the validated payload: an id reused for another command is refused. */
  payload_sha256: string
  status: JournalStatus
  started_at: string
  updated_at: string
  result?: unknown
  error?: string
  upgrade?: UpgradeJournal
}

const upgradeAction = z.enum(UPGRADE_ACTIONS)
const upgradeJournal = z.object({
  previous: activeDeployment,
  actions_done: z.array(upgradeAction),
  actions_skipped: z.array(upgradeAction),
  compensated: z.array(upgradeAction),
  failure: z.object({ action: upgradeAction, message: z.string() }).optional(),
  download: z.string().optional(),
})
const commandJournal = z.object({
  id: z.string(),
  type: z.string(),
  payload_sha256: z.string(),
  status: z.enum(['running', 'completed', 'failed']),
  started_at: z.string(),
  updated_at: z.string(),
  result: z.unknown().optional(),
  error: z.string().optional(),
  upgrade: upgradeJournal.optional(),
})

function journalFile(dir: StateDir, commandId: string): string {
  return path.join(dir.commandsDir, `${assertSafeSegment(commandId, 'command id')}.json`)
}

export function readCommandJournal(dir: StateDir, commandId: string): CommandJournal | undefined {
  let raw: string
  try {
    raw = fs.readFileSync(journalFile(dir, commandId), 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  return commandJournal.parse(JSON.parse(raw)) as CommandJournal
}

export function writeCommandJournal(dir: StateDir, journal: CommandJournal): void {
  writeFileAtomic(journalFile(dir, journal.id), `${JSON.stringify(journal, null, 2)}\n`, 0o600)
}

/**
 * Why a command failed, for `CommandFailed{error, result_json}`: `result` carries a partial
 * result where the command type has one (an upgrade's compensation outcome).
 */
export class CommandError extends Error {
  override readonly name = 'CommandError'
  constructor(
    message: string,
    readonly result?: unknown,
  ) {
    super(message)
  }
}

// ---- backups ----

/** Deletes entries of `backups/` created `retentionMs` or longer before `now`; returns their names. */
export async function pruneBackups(dir: StateDir, now: Date, retentionMs = BACKUP_RETENTION_MS): Promise<string[]> {
  const removed: string[] = []
  for (const name of (await fs.promises.readdir(dir.backupsDir)).sort()) {
    const entry = path.join(dir.backupsDir, name)
    if (now.getTime() - backupCreatedAt(entry).getTime() >= retentionMs) {
      await fs.promises.rm(entry, { recursive: true, force: true })
      removed.push(name)
    }
  }
  return removed
}

function backupCreatedAt(entry: string): Date {
  try {
    const manifest = JSON.parse(fs.readFileSync(path.join(entry, 'manifest.json'), 'utf8')) as { created_at?: unknown }
    if (typeof manifest.created_at === 'string') {
      const at = new Date(manifest.created_at)
      if (!Number.isNaN(at.getTime())) return at
    }
  } catch {
    // no readable manifest (e.g. a staging leftover): fall back to the modification time
  }
  return fs.lstatSync(entry).mtime
}
