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
import type { ReleasePublicKey } from '../artifacts/release-keys.js'
import { verifyingKey } from '../artifacts/signing.js'
import { assertSafeSegment, releaseBinaryPath, type StateDir } from './state-dir.js'

export type FetchLike = typeof globalThis.fetch

export interface AcquireOptions {
  fetch?: FetchLike
  logger: Logger
  /** Whole-download limit (default 10 minutes, the upgrade activity's timeout). */
  timeoutMs?: number
  /**
   * The release public keys this agent was configured with (ARTIFACT_RELEASE_PUBLIC_KEYS). An
   * artifact that carries a signature must verify against one of them.
   */
  releaseKeys?: readonly ReleasePublicKey[]
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

/**
 * Downloads or copies the artifact to `downloads/` (through a `.part` file); returns its path.
 *
 * Every failure to get the bytes is the same "artifact not found" to the control plane: a missing
 * file, a refused connection, an HTTP error, a timeout or a redirect (never followed: the URL the
 * rollout was checked with is the only one fetched). Told apart, they would let whoever names the
 * URL probe the host's files and the ports it can reach (docs/artifacts.md). The agent's own log
 * keeps the cause for the operator.
 */
export async function acquireArtifact(dir: StateDir, binaryName: string, artifact: ArtifactSpec, options: AcquireOptions): Promise<string> {
  const name = `${assertSafeSegment(binaryName, 'binary name')}-${assertSafeSegment(artifact.version, 'version')}-${artifact.sha256.slice(0, 16)}`
  const target = path.join(dir.downloadsDir, name)
  const part = `${target}.part`
  const where = describeUrl(artifact.url)
  const url = new URL(artifact.url)
  if (url.protocol !== 'file:' && url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`artifact URL scheme ${url.protocol} is not supported (file://, http://, https://)`)
  }
  try {
    if (url.protocol === 'file:') await fs.promises.copyFile(fileURLToPath(url), part)
    else await download(artifact.url, part, options)
    await fs.promises.rename(part, target)
  } catch (err) {
    await fs.promises.rm(part, { force: true })
    options.logger.warn({ url: where, version: artifact.version, cause: causeOf(err) }, 'artifact not found')
    throw new Error(`artifact not found at ${where}`)
  }
  options.logger.info({ url: where, version: artifact.version }, 'artifact acquired')
  return target
}

function causeOf(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause
  return (err as NodeJS.ErrnoException).code ?? cause?.code ?? cause?.message ?? (err as Error).message
}

async function download(url: string, file: string, options: AcquireOptions): Promise<void> {
  const fetchImpl = options.fetch ?? globalThis.fetch
  const response = await fetchImpl(url, { signal: AbortSignal.timeout(options.timeoutMs ?? 10 * 60_000), redirect: 'manual' })
  if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`)
  await pipeline(Readable.fromWeb(response.body as WebReadableStream<Uint8Array>), fs.createWriteStream(file, { mode: 0o644 }))
}

/**
 * Throws when the file's SHA-256 is not `expected`. The message names neither digest: what was
 * fetched may be a file that is not an artifact.
 */
export async function verifyArtifact(file: string, expected: string): Promise<void> {
  const actual = await sha256File(file)
  if (actual !== expected) throw new Error('artifact checksum mismatch')
}

/**
 * Checks a signed artifact's release signature against the agent's release keys, over the
 * binary, version, digest and size it is installed as (src/artifacts/signing.ts). An artifact
 * without a signature (a chain profile's release, an allowed free URL) is left to its checksum;
 * a signature that verifies against none of the keys, or that the agent has no key to check,
 * fails as "artifact signature mismatch", naming no digest. Call after verifyArtifact.
 */
export async function verifyReleaseSignature(file: string, binaryName: string, artifact: ArtifactSpec, releaseKeys: readonly ReleasePublicKey[] | undefined): Promise<void> {
  if (artifact.signature === undefined) return
  const size = (await fs.promises.stat(file)).size
  const key = verifyingKey({ binary_name: binaryName, version: artifact.version, sha256: artifact.sha256, size_bytes: size }, artifact.signature, releaseKeys ?? [])
  if (!key) throw new Error('artifact signature mismatch')
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
    await verifyReleaseSignature(downloaded, binaryName, artifact, options.releaseKeys)
    await installArtifact(dir, binaryName, artifact.version, downloaded)
  } finally {
    await fs.promises.rm(downloaded, { force: true })
  }
  return true
}
