/**
 * The SHA-256 of a file on this host, remembered for as long as the file stays the same file with
 * the same size and times. Loading the chain catalogue checks every release binary it pins (anvil's
 * three releases are about 120 MB): 0.7 s of CPU at each load, which every daemon start, catalogue
 * reload and test paid again for files that had not changed. A write to the file changes its ctime,
 * which no tool can set back, so a changed binary is always hashed again.
 *
 * Digests of large files are also kept across processes, in the user's cache directory
 * (`$XDG_CACHE_HOME/nodeplane/file-digests.json`, else `~/.cache/nodeplane/`), so each daemon
 * start does not hash the same binaries again. The entry holds for the same file identity only;
 * the agent checks an artifact's digest itself before it installs it, whatever this cache says.
 */
import { createHash } from 'node:crypto'
import { createReadStream, mkdirSync, readFileSync, renameSync, statSync, writeFileSync, type BigIntStats } from 'node:fs'
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'

interface Remembered {
  identity: string
  digest: string
}

const remembered = new Map<string, Remembered>()
/** Smaller files hash faster than the cache file is read and written. */
const SHARED_MIN_BYTES = 1 << 20
const SHARED_MAX_ENTRIES = 200

function sharedCacheFile(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache')
  return path.join(base, 'nodeplane', 'file-digests.json')
}

function readShared(file: string): Record<string, Remembered> {
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as { entries?: Record<string, Remembered> }
    return parsed.entries && typeof parsed.entries === 'object' ? parsed.entries : {}
  } catch {
    return {}
  }
}

function fromShared(key: string, identity: string): string | undefined {
  const entry = readShared(sharedCacheFile())[key]
  return entry?.identity === identity && /^[0-9a-f]{64}$/.test(entry.digest) ? entry.digest : undefined
}

/** Best effort: a cache directory that cannot be written only means hashing again next time. */
function toShared(key: string, entry: Remembered): void {
  const file = sharedCacheFile()
  try {
    const entries = { ...readShared(file), [key]: entry }
    const kept = Object.fromEntries(Object.entries(entries).slice(-SHARED_MAX_ENTRIES))
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    // Several processes may write at once: each renames a whole file of its own into place.
    const temp = `${file}.${process.pid}.${Date.now()}.tmp`
    writeFileSync(temp, JSON.stringify({ version: 1, entries: kept }), { mode: 0o600 })
    renameSync(temp, file)
  } catch {
    // not writable (a read-only home, a sandboxed unit): the in-process memo still holds
  }
}

function remember(key: string, stats: BigIntStats, identity: string, hash: () => string): string
function remember(key: string, stats: BigIntStats, identity: string, hash: () => Promise<string>): Promise<string>
function remember(key: string, stats: BigIntStats, identity: string, hash: () => string | Promise<string>): string | Promise<string> {
  const known = remembered.get(key)
  if (known?.identity === identity) return known.digest
  const shared = stats.size >= SHARED_MIN_BYTES
  const cached = shared ? fromShared(key, identity) : undefined
  const keep = (digest: string): string => {
    remembered.set(key, { identity, digest })
    if (shared && cached === undefined) toShared(key, { identity, digest })
    return digest
  }
  if (cached !== undefined) return keep(cached)
  const digest = hash()
  return typeof digest === 'string' ? keep(digest) : digest.then(keep)
}

function identityOf(stats: BigIntStats): string {
  return `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`
}

/** The file's SHA-256 in hex; rejects as fs does (ENOENT…) when it cannot be read. */
export async function sha256OfFile(file: string): Promise<string> {
  const key = path.resolve(file)
  const stats = await fs.stat(key, { bigint: true })
  return remember(key, stats, identityOf(stats), async () => {
    const hash = createHash('sha256')
    for await (const chunk of createReadStream(key, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer)
    return hash.digest('hex')
  })
}

/** sha256OfFile for synchronous callers. */
export function sha256OfFileSync(file: string): string {
  const key = path.resolve(file)
  const stats = statSync(key, { bigint: true })
  return remember(key, stats, identityOf(stats), () => createHash('sha256').update(readFileSync(key)).digest('hex'))
}
