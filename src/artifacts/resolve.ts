/**
 * A rollout naming a stored artifact by binary, version and digest (docs/artifacts.md,
 * "Rollouts from the store"): it must be in the store with those bytes, and signed by one of the
 * release public keys the control plane is configured with; the signature is verified here, not
 * trusted from the row. Problems name the release, never a digest of anything fetched.
 */
import type { Queryable } from '../db/knex.js'
import type { ArtifactBlobStore } from './blob-store.js'
import { verifyingKey, type ReleasePublicKey } from './signing.js'
import { findArtifact } from './store.js'
import { storedArtifactUrl } from './stored-url.js'

/** What rollout creation needs of the store. */
export interface ArtifactSource {
  blobs: ArtifactBlobStore
  /** ARTIFACT_RELEASE_PUBLIC_KEYS. */
  releaseKeys: readonly ReleasePublicKey[]
}

export interface ArtifactReference {
  binary_name: string
  version: string
  /** Lowercase hex. */
  sha256: string
}

/** The URL agents fetch it by (from the agent-gateway, stored-url.ts), or the one problem that refuses it. */
export async function resolveStoredArtifact(db: Queryable, source: ArtifactSource | undefined, ref: ArtifactReference): Promise<{ url: string } | { problem: string }> {
  const name = `${ref.binary_name} ${ref.version}`
  if (!source) return { problem: `artifact not found: this server has no artifact store configured, so ${name} cannot come from it` }
  const record = await findArtifact(db, ref.binary_name, ref.version)
  if (!record) return { problem: `artifact not found: no ${name} in the artifact store (add it with \`nodeplane artifact add\`)` }
  if (record.sha256 !== ref.sha256) return { problem: `checksum mismatch: the stored ${name} has other bytes than the checksum given` }
  if (record.signature === null) return { problem: `${name} is unsigned in the artifact store; add it signed by a release key (\`nodeplane artifact add --key\`)` }
  if (source.releaseKeys.length === 0) return { problem: `signature mismatch: no release public key is configured (ARTIFACT_RELEASE_PUBLIC_KEYS), so ${name}'s signature cannot be checked` }
  if (!verifyingKey(record, record.signature, source.releaseKeys)) {
    return { problem: `signature mismatch: ${name} is not signed by a release key this server trusts (key ${record.key_id ?? 'unknown'}; trusted: ${source.releaseKeys.map((k) => k.key_id).join(', ')})` }
  }
  if (!(await source.blobs.has(record.sha256))) return { problem: `artifact not found: the bytes of ${name} are missing from the artifact store (${source.blobs.location})` }
  return { url: storedArtifactUrl(record) }
}
