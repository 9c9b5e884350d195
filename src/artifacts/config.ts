/** What the `nodeplane artifact` commands read: the data directory (the local blob store) and the release public keys. */
import { z } from 'zod'
import { loadConfig, sharedEnv, type Env } from '../config/env.js'
import { localBlobStore, type LocalBlobStore } from './blob-store.js'
import { releasePublicKeysSetting, type ReleasePublicKey } from './release-keys.js'

export const artifactCommandEnv = z.object({ ...sharedEnv, ARTIFACT_RELEASE_PUBLIC_KEYS: releasePublicKeysSetting })

export function artifactCommandConfig(env: Env): { blobs: LocalBlobStore; releaseKeys: ReleasePublicKey[] } {
  const config = loadConfig(artifactCommandEnv, env)
  return { blobs: localBlobStore(config.NODEPLANE_DATA_DIR), releaseKeys: config.ARTIFACT_RELEASE_PUBLIC_KEYS }
}
