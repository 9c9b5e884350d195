/** The host fleet's SSH side as a daemon builds it from its settings (HOSTS_* in docs/configuration.md). */
import path from 'node:path'
import { createSshPool, type SshPool } from './ssh-pool.js'
import { fileSshKeyStore, type SshKeyStore } from './ssh-keys.js'

export interface HostFleetSettings {
  NODEPLANE_DATA_DIR: string
  /** Default: <data dir>/secrets/ssh */
  HOSTS_SSH_KEY_DIR?: string | undefined
  HOSTS_SSH_CONNECT_TIMEOUT?: number | undefined
  HOSTS_SSH_MAX_SESSIONS?: number | undefined
  HOSTS_MIN_FREE_DISK?: number | undefined
}

export const DEFAULT_MIN_FREE_DISK_BYTES = 10 * 2 ** 30

export interface OpenHostFleet {
  pool: SshPool
  keys: SshKeyStore
  minFreeDiskBytes: number
  close(): Promise<void>
}

export function sshKeyDir(settings: Pick<HostFleetSettings, 'NODEPLANE_DATA_DIR' | 'HOSTS_SSH_KEY_DIR'>): string {
  return path.resolve(settings.HOSTS_SSH_KEY_DIR ?? path.join(settings.NODEPLANE_DATA_DIR, 'secrets', 'ssh'))
}

export function openHostFleet(settings: HostFleetSettings): OpenHostFleet {
  const pool = createSshPool({
    ...(settings.HOSTS_SSH_CONNECT_TIMEOUT !== undefined ? { connectTimeoutMs: settings.HOSTS_SSH_CONNECT_TIMEOUT } : {}),
    ...(settings.HOSTS_SSH_MAX_SESSIONS !== undefined ? { maxSessionsPerHost: settings.HOSTS_SSH_MAX_SESSIONS } : {}),
  })
  return { pool, keys: fileSshKeyStore(sshKeyDir(settings)), minFreeDiskBytes: settings.HOSTS_MIN_FREE_DISK ?? DEFAULT_MIN_FREE_DISK_BYTES, close: () => pool.close() }
}
