/**
 * Chain artifacts: acquire (a stored artifact from the agent-gateway, or a file:// or http(s)://
 * URL) into `downloads/`, verify the SHA-256 and the release signature, install into
 * `releases/<version>/<binary_name>`.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import { fileURLToPath } from 'node:url'
import type { Logger } from 'pino'
import type { ArtifactSpec } from '../agent-gateway/protocol.js'
import type { ReleasePublicKey } from '../artifacts/release-keys.js'
import { verifyingKey } from '../artifacts/signing.js'
import { parseStoredArtifactUrl, STORED_ARTIFACT_SCHEME } from '../artifacts/stored-url.js'
import type { StoredArtifactFetcher } from './artifact-fetch.js'
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
  /** AGENT_REQUIRE_SIGNED_ARTIFACTS: an artifact without a release signature is refused. */
  requireSigned?: boolean
  /** Fetches a stored artifact (a `nodeplane-artifact:` URL) from the agent-gateway. */
  stored?: StoredArtifactFetcher
}

/** The URL without credentials or query string (signed URLs carry secrets there). */
export function describeUrl(url: string): string {
  const stored = parseStoredArtifactUrl(url)
  // The digest is left out: an agent names no digest of anything it fetched.
  if (stored) return `the artifact store (${stored.binary_name} ${stored.version})`
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
  if (url.protocol !== 'file:' && url.protocol !== 'http:' && url.protocol !== 'https:' && url.protocol !== STORED_ARTIFACT_SCHEME) {
    throw new Error(`artifact URL scheme ${url.protocol} is not supported (${STORED_ARTIFACT_SCHEME}, file://, http://, https://)`)
  }
  try {
    if (url.protocol === STORED_ARTIFACT_SCHEME) await fetchStored(artifact, part, options)
    else if (url.protocol === 'file:') await fs.promises.copyFile(fileURLToPath(url), part)
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
  const code = (err as { code?: unknown }).code
  // A gRPC status (FetchArtifact) has a numeric code; its message names it ("5 NOT_FOUND: …").
  if (typeof code === 'number') return (err as Error).message
  const cause = (err as { cause?: { code?: string; message?: string } }).cause
  return (err as NodeJS.ErrnoException).code ?? cause?.code ?? cause?.message ?? (err as Error).message
}

async function fetchStored(artifact: ArtifactSpec, file: string, options: AcquireOptions): Promise<void> {
  const ref = parseStoredArtifactUrl(artifact.url)
  if (!ref) throw new Error('malformed stored-artifact URL')
  // The command's checksum is what gets verified: a URL naming other bytes is a malformed command.
  if (ref.sha256 !== artifact.sha256 || ref.version !== artifact.version) throw new Error('the stored-artifact URL names another version or digest than the command')
  if (!options.stored) throw new Error('this agent has no connection to fetch stored artifacts through')
  await options.stored.fetchTo(ref, file, AbortSignal.timeout(options.timeoutMs ?? 10 * 60_000))
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
 * without a signature (a chain profile's release, an allowed free URL) is refused when the agent
 * requires signed artifacts, and otherwise left to its checksum; a signature that verifies
 * against none of the keys, or that the agent has no key to check, fails as "artifact signature
 * mismatch". Neither message names a digest. Call after verifyArtifact.
 */
export async function verifyReleaseSignature(
  file: string,
  binaryName: string,
  artifact: ArtifactSpec,
  releaseKeys: readonly ReleasePublicKey[] | undefined,
  requireSigned = false,
): Promise<void> {
  if (artifact.signature === undefined) {
    if (requireSigned) throw new Error(`artifact unsigned: ${binaryName} ${artifact.version} has no release signature and this agent requires one (AGENT_REQUIRE_SIGNED_ARTIFACTS)`)
    return
  }
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
    await verifyReleaseSignature(downloaded, binaryName, artifact, options.releaseKeys, options.requireSigned)
    await installArtifact(dir, binaryName, artifact.version, downloaded)
  } finally {
    await fs.promises.rm(downloaded, { force: true })
  }
  return true
}
