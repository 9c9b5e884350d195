/**
 * The SHA-256 of a file on this host, remembered for as long as the file stays the same file with
 * the same size and times. Loading the chain catalogue checks every release binary it pins (anvil's
 * three releases are about 120 MB): 0.7 s of CPU at each load, which every daemon start, catalogue
 * reload and test paid again for files that had not changed. A write to the file changes its ctime,
 * which no tool can set back, so a changed binary is always hashed again.
 */
import { createHash } from 'node:crypto'
import { createReadStream, readFileSync, statSync, type BigIntStats } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'

const remembered = new Map<string, { identity: string; digest: string }>()

function identityOf(stats: BigIntStats): string {
  return `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`
}

/** The file's SHA-256 in hex; rejects as fs does (ENOENT…) when it cannot be read. */
export async function sha256OfFile(file: string): Promise<string> {
  const key = path.resolve(file)
  const identity = identityOf(await fs.stat(key, { bigint: true }))
  const known = remembered.get(key)
  if (known?.identity === identity) return known.digest
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(key, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer)
  const digest = hash.digest('hex')
  remembered.set(key, { identity, digest })
  return digest
}

/** sha256OfFile for synchronous callers. */
export function sha256OfFileSync(file: string): string {
  const key = path.resolve(file)
  const identity = identityOf(statSync(key, { bigint: true }))
  const known = remembered.get(key)
  if (known?.identity === identity) return known.digest
  const digest = createHash('sha256').update(readFileSync(key)).digest('hex')
  remembered.set(key, { identity, digest })
  return digest
}
