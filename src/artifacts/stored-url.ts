/**
 * How a rollout names a stored artifact to its agents (docs/artifacts.md, "Serving artifacts to
 * agents"): `nodeplane-artifact:/<binary>/<version>/<sha256 hex>`. It is no place: an agent given
 * one asks the agent-gateway it is connected to (FetchArtifact, over the gateway's TLS with its own
 * token), so an artifact reaches a host anywhere the agent can reach its gateway, and nothing the
 * API accepts can make an agent read a file of its host or a URL of its network.
 */
export const STORED_ARTIFACT_SCHEME = 'nodeplane-artifact:'

export interface StoredArtifactRef {
  binary_name: string
  version: string
  /** Lowercase hex. */
  sha256: string
}

// The store's own name rules (service.ts BINARY_NAME, VERSION), so a parsed reference needs no more checks.
const PATTERN = /^nodeplane-artifact:\/([A-Za-z0-9._-]{1,100})\/([A-Za-z0-9][A-Za-z0-9._+-]{0,63})\/([0-9a-f]{64})$/

export function storedArtifactUrl(ref: StoredArtifactRef): string {
  return `${STORED_ARTIFACT_SCHEME}/${ref.binary_name}/${ref.version}/${ref.sha256}`
}

/** The reference a stored-artifact URL names; undefined for any other URL (or a malformed one). */
export function parseStoredArtifactUrl(url: string): StoredArtifactRef | undefined {
  const match = PATTERN.exec(url)
  if (!match) return undefined
  const [, binary_name, version, sha256] = match as unknown as [string, string, string, string]
  return { binary_name, version, sha256 }
}
