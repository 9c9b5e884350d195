/**
 * Chain artifacts: acquire (file:// or http(s)://) into `downloads/`, verify the SHA-256,
 * install into `releases/<version>/<binary_name>`.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import { fileURLToPath } from 'node:url'
import type { Logger } from 'pino'
import type { ArtifactSpec } from '../agents/protocol.js'
import { assertSafeSegment, releaseBinaryPath, type StateDir } from './state-dir.js'

export type FetchLike = typeof globalThis.fetch

export interface AcquireOptions {
  fetch?: FetchLike
  logger: Logger
  /** Whole-download limit (default 10 minutes, the upgrade activity's timeout). */
  timeoutMs?: number
}

/** The URL without credentials or query string (signed URLs carry secrets there). */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url)
    return u.protocol === 'file:' ? u.href : `${u.origin}${u.pathname}`
  } catch {
    return '(invalid URL)'
  }
}

export async function sha256File(file: string): Promise<string> {
  const hash = crypto.createHash('sha256')
  await pipeline(fs.createReadStream(file), hash)
  return hash.digest('hex')
}

/** True when `releases/<version>/<binary_name>` exists and has the artifact's checksum. */
export async function isInstalled(dir: StateDir, binaryName: string, artifact: ArtifactSpec): Promise<boolean> {
  const file = releaseBinaryPath(dir, binaryName, artifact.version)
  if (!fs.existsSync(file)) return false
  return (await sha256File(file)) === artifact.sha256
}

/** Downloads or copies the artifact to `downloads/` (through a `.part` file); returns its path. */
export async function acquireArtifact(dir: StateDir, binaryName: string, artifact: ArtifactSpec, options: AcquireOptions): Promise<string> {
  const name = `${assertSafeSegment(binaryName, 'binary name')}-${assertSafeSegment(artifact.version, 'version')}-${artifact.sha256.slice(0, 16)}`
  const target = path.join(dir.downloadsDir, name)
  const part = `${target}.part`
  const where = describeUrl(artifact.url)
  const url = new URL(artifact.url)
  try {
    if (url.protocol === 'file:') {
      const source = fileURLToPath(url)
      try {
        await fs.promises.copyFile(source, part)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        throw new Error(code === 'ENOENT' ? `artifact not found at ${source}` : `cannot read artifact ${source}: ${(err as Error).message}`)
      }
    } else if (url.protocol === 'http:' || url.protocol === 'https:') {
      await download(artifact.url, where, part, options)
    } else {
      throw new Error(`artifact URL scheme ${url.protocol} is not supported (file://, http://, https://)`)
    }
    await fs.promises.rename(part, target)
  } catch (err) {
    await fs.promises.rm(part, { force: true })
    throw err
  }
  options.logger.info({ url: where, version: artifact.version }, 'artifact acquired')
  return target
}

async function download(url: string, where: string, file: string, options: AcquireOptions): Promise<void> {
  const fetchImpl = options.fetch ?? globalThis.fetch
  let response: Response
  try {
    response = await fetchImpl(url, { signal: AbortSignal.timeout(options.timeoutMs ?? 10 * 60_000), redirect: 'follow' })
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause
    throw new Error(`artifact download from ${where} failed: ${cause?.code ?? cause?.message ?? (err as Error).message}`)
  }
  if (!response.ok || !response.body) {
    throw new Error(`artifact download from ${where} failed: HTTP ${response.status}`)
  }
  try {
    await pipeline(Readable.fromWeb(response.body as WebReadableStream<Uint8Array>), fs.createWriteStream(file, { mode: 0o644 }))
  } catch (err) {
    throw new Error(`artifact download from ${where} failed: ${(err as Error).message}`)
  }
}

/** Throws when the file's SHA-256 is not `expected`. */
export async function verifyArtifact(file: string, expected: string): Promise<void> {
  const actual = await sha256File(file)
  if (actual !== expected) throw new Error(`artifact checksum mismatch: expected sha256 ${expected}, got ${actual}`)
}

/** Moves a verified download into `releases/<version>/<binary_name>` (mode 0755). */
export async function installArtifact(dir: StateDir, binaryName: string, version: string, downloaded: string): Promise<string> {
  const target = releaseBinaryPath(dir, binaryName, version)
  await fs.promises.mkdir(path.dirname(target), { recursive: true, mode: 0o755 })
  await fs.promises.chmod(downloaded, 0o755)
  await fs.promises.rename(downloaded, target)
  return target
}

/**
 * Installs the artifact unless that version is already installed with this checksum.
 * Returns whether anything was installed.
 */
export async function ensureInstalled(dir: StateDir, binaryName: string, artifact: ArtifactSpec, options: AcquireOptions): Promise<boolean> {
  if (await isInstalled(dir, binaryName, artifact)) return false
  const downloaded = await acquireArtifact(dir, binaryName, artifact, options)
  try {
    await verifyArtifact(downloaded, artifact.sha256)
    await installArtifact(dir, binaryName, artifact.version, downloaded)
  } finally {
    await fs.promises.rm(downloaded, { force: true })
  }
  return true
}
