/**
 * `<data dir>/stack.json`: what `nodeplane up` started and where, for people and scripts in
 * another terminal. Written when every daemon is ready, removed on stop.
 */
import fs from 'node:fs'
import path from 'node:path'

export interface StackFile {
  pid: number
  started_at: string
  data_dir: string
  daemons: string[]
  api_url: string
  /** The auth-server (wallet sign-in, token refresh, `/.well-known/jwks.json`). */
  auth_url: string
  /**
   * `<data dir>/admin-api-key` (mode 0600): an admin API key of the local operator user,
   * reissued on every start. The CLI uses it when nothing else gives a credential (docs/cli.md).
   */
  admin_api_key_file: string
  database_url: string
  payments_database_url: string
  bus: 'local' | 'nats'
  /** host:port node agents dial. */
  agent_gateway?: string
  /** The development CA agents must trust; null when the gateway serves configured certificates. */
  agent_ca_file?: string | null
  /** host:port of the payment service's gRPC (mutual TLS). */
  payment_grpc?: string
  /** The payment service's HTTP: /webhooks/card-provider, /health, /readyz. */
  payment_http_url?: string
  payment_metrics_url?: string
  payment_ca_file?: string
  /** The rpc-gateway: customers' JSON-RPC endpoints are `{rpc_url}/v1/{node_id}`. */
  rpc_url?: string
  [extra: string]: unknown
}

export function stackFilePath(dataDir: string): string {
  return path.join(dataDir, 'stack.json')
}

export function writeStackFile(dataDir: string, stack: StackFile): void {
  const file = stackFilePath(dataDir)
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, `${JSON.stringify(stack, null, 2)}\n`, { mode: 0o644 })
  fs.renameSync(tmp, file)
}

export function readStackFile(dataDir: string): StackFile | undefined {
  try {
    return JSON.parse(fs.readFileSync(stackFilePath(dataDir), 'utf8')) as StackFile
  } catch {
    return undefined
  }
}

/** Removes the file only if it is ours (another `up` may have replaced a stale one). */
export function removeStackFile(dataDir: string, pid = process.pid): void {
  const current = readStackFile(dataDir)
  if (current && current.pid !== pid) return
  fs.rmSync(stackFilePath(dataDir), { force: true })
}

export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export const ADMIN_API_KEY_FILE = 'admin-api-key'

export function adminApiKeyPath(dataDir: string): string {
  return path.join(dataDir, ADMIN_API_KEY_FILE)
}

/**
 * Writes `<data dir>/admin-api-key` atomically; the file only ever exists with mode 0600
 * (created so, whatever the umask, then renamed over the previous one).
 */
export function writeAdminApiKeyFile(dataDir: string, key: string): string {
  const file = adminApiKeyPath(dataDir)
  const tmp = `${file}.${process.pid}.tmp`
  fs.rmSync(tmp, { force: true })
  fs.writeFileSync(tmp, `${key}\n`, { mode: 0o600, flag: 'wx' })
  fs.renameSync(tmp, file)
  return file
}
