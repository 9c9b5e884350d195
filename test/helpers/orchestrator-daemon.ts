/**
 * The settings of a `nodeplane daemon orchestrator` child process for the crash tests: its own
 * directory with the local provider's hosts, the gateway's CA and a master key; a short lease so
 * a killed orchestrator's runs are taken over quickly.
 */
import fs from 'node:fs'
import path from 'node:path'
import { createLocalMasterKey } from '../../src/secrets/master-key.js'
import { devTls, type RunningGateway } from '../integration/agent-gateway/harness.js'
import { tempDir } from './cli.js'

export async function orchestratorDaemonEnv(databaseUrl: string, natsUrl: string, gateway: RunningGateway): Promise<{ env: Record<string, string>; hostsDir: string }> {
  const dir = tempDir()
  const hostsDir = path.join(dir, 'hosts')
  const caFile = path.join(dir, 'ca.pem')
  fs.writeFileSync(caFile, devTls().ca)
  const masterKeyFile = path.join(dir, 'master.key')
  await createLocalMasterKey(masterKeyFile)
  const env = {
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrl,
    NODEPLANE_DATA_DIR: path.join(dir, 'data'),
    LOCAL_HOSTS_DIR: hostsDir,
    AGENT_GATEWAY_URL: gateway.target,
    AGENT_GATEWAY_CA_FILE: caFile,
    SECRETS_MASTER_KEY_FILE: masterKeyFile,
    WORKFLOW_LEASE: '3s',
    WORKFLOW_POLL_INTERVAL: '100ms',
  }
  return { env, hostsDir }
}
