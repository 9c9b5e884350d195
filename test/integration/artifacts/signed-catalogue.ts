/** The repo's catalogue with the devnet releases signed by a test release key (docs/artifacts.md, "Chain releases"). */
import fs from 'node:fs'
import { fileURLToPath } from 'node:url'
import { signArtifact, type ReleaseKeyPair } from '../../../src/artifacts/signing.js'
import { getProfile, type ChainCatalogue } from '../../../src/config/chains.js'

export function withSignedDevnetReleases(key: ReleaseKeyPair): (catalogue: ChainCatalogue) => ChainCatalogue {
  return (catalogue) => {
    const devnet = getProfile(catalogue, 'devnet')
    const releases = devnet.releases.map((r) => ({
      ...r,
      signature: signArtifact({ binary_name: devnet.binary_name, version: r.version, sha256: r.sha256, size_bytes: fs.statSync(fileURLToPath(r.url)).size }, key.secretKey),
    }))
    return { ...catalogue, profiles: new Map([...catalogue.profiles, ['devnet', { ...devnet, releases }]]) }
  }
}
