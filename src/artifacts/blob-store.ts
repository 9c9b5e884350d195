/**
 * Where an artifact's bytes live, by their SHA-256 (docs/artifacts.md, "Storage"). The
 * `artifacts` table is the catalogue; this holds content only, so two versions with the same
 * bytes share one blob and a blob's name proves what it holds.
 *
 * `LocalBlobStore` keeps `<root>/sha256/<first two hex>/<hex>` in the data directory. A bucket
 * (S3 or compatible) implements the same four calls: put = PutObject of key `sha256/<hex>` with
 * `x-amz-checksum-sha256` (the bucket then refuses bytes that do not match), has = HeadObject,
 * read = GetObject, remove = DeleteObject. None is built here: the interface is the seam.
 * Agents never read a store directly: the agent-gateway streams `read` to them (FetchArtifact).
 *
 * put writes `<hex>.part` beside the target and renames it once its digest checked out, so a
 * process dying mid-copy leaves a `.part` (overwritten by the next put), never a blob whose
 * name lies.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { pathToFileURL } from 'node:url'
import { NotFoundError, ValidationError } from '../errors.js'

export interface ArtifactBlobStore {
  /** Stores the file's bytes as `sha256`; throws when they do not hash to it. Idempotent. */
  put(sha256: string, file: string): Promise<void>
  has(sha256: string): Promise<boolean>
  /** The bytes; NotFoundError when absent. */
  read(sha256: string): Promise<Readable>
  /** Removes the blob; no error when it is already gone. */
  remove(sha256: string): Promise<void>
  /** Where it stores, for messages (no credentials). */
  readonly location: string
}

const HEX = /^[0-9a-f]{64}$/

function checkedDigest(sha256: string): string {
  if (!HEX.test(sha256)) throw new ValidationError(`"${sha256.slice(0, 80)}" is not a lowercase hex SHA-256`)
  return sha256
}

/** SHA-256 (hex) and size of a file, streamed. */
export async function digestFile(file: string): Promise<{ sha256: string; size_bytes: number }> {
  const hash = crypto.createHash('sha256')
  let size = 0
  for await (const chunk of fs.createReadStream(file)) {
    hash.update(chunk as Buffer)
    size += (chunk as Buffer).length
  }
  return { sha256: hash.digest('hex'), size_bytes: size }
}

export class LocalBlobStore implements ArtifactBlobStore {
  readonly location: string

  constructor(readonly root: string) {
    this.location = root
  }

  #path(sha256: string): string {
    const hex = checkedDigest(sha256)
    return path.join(this.root, 'sha256', hex.slice(0, 2), hex)
  }

  async put(sha256: string, file: string): Promise<void> {
    const target = this.#path(sha256)
    if (fs.existsSync(target)) return
    await fs.promises.mkdir(path.dirname(target), { recursive: true, mode: 0o755 })
    const part = `${target}.part`
    const hash = crypto.createHash('sha256')
    const source = fs.createReadStream(file)
    source.on('data', (chunk) => hash.update(chunk as Buffer))
    try {
      await pipeline(source, fs.createWriteStream(part, { mode: 0o644 }))
      if (hash.digest('hex') !== sha256) throw new ValidationError(`${file} changed while it was stored (its digest is no longer the one computed before)`)
      await fs.promises.rename(part, target)
    } catch (err) {
      await fs.promises.rm(part, { force: true })
      throw err
    }
  }

  /**
   * The blob's `file://` path: what rollouts created before the gateway served artifacts
   * (FetchArtifact) named, so removal still finds those rollouts (store.ts, artifactInUse).
   */
  fileUrl(sha256: string): string {
    return pathToFileURL(this.#path(sha256)).href
  }

  async has(sha256: string): Promise<boolean> {
    return fs.existsSync(this.#path(sha256))
  }

  async read(sha256: string): Promise<Readable> {
    const file = this.#path(sha256)
    try {
      const handle = await fs.promises.open(file, 'r')
      return handle.createReadStream()
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new NotFoundError('artifact not found', `no blob sha256:${sha256} in ${this.location}`)
      throw err
    }
  }

  async remove(sha256: string): Promise<void> {
    await fs.promises.rm(this.#path(sha256), { force: true })
  }
}

/** The data directory's store: `<data dir>/artifacts`. */
export function localBlobStore(dataDir: string): LocalBlobStore {
  return new LocalBlobStore(path.join(dataDir, 'artifacts'))
}
