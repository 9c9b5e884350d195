/** A real agent-gateway on loopback with real TLS (the dev CA), and real agent clients. */
import fs from 'node:fs'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import { AgentClient, type AgentClientOptions, type AgentHost, type CommandRunner, type HostSnapshot } from '../../../src/node-agent/client.js'
import { AgentGateway, type AgentGatewayOptions } from '../../../src/agent-gateway/gateway.js'
import { ensureDevCertificates, readTlsMaterial, type TlsMaterial } from '../../../src/agent-gateway/tls.js'
import type { Db } from '../../../src/db/knex.js'
import { generateBoxKeyPair } from '../../../src/secrets/sealed-box.js'
import { tempDir } from '../../helpers/cli.js'

export const quiet = pino({ level: 'silent' })

let sharedTls: TlsMaterial | undefined
/** One dev CA per test file: generating RSA keys costs ~100 ms each. */
export function devTls(): TlsMaterial {
  sharedTls ??= readTlsMaterial(ensureDevCertificates(path.join(tempDir('nodeplane-tls-'), 'ca')))
  return sharedTls
}

export interface RunningGateway {
  gateway: AgentGateway
  target: string
  stop(): Promise<void>
}

export async function startGateway(db: Db, overrides: Partial<AgentGatewayOptions> = {}, port = 0): Promise<RunningGateway> {
  const tls = devTls()
  const gateway = new AgentGateway({
    db,
    logger: quiet,
    heartbeatIntervalSeconds: 15,
    progressCheckIntervalSeconds: 30,
    heartbeatFlushIntervalMs: 30,
    commandPollIntervalMs: 30,
    ...overrides,
  })
  const bound = await gateway.listen('127.0.0.1', port, grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
  return { gateway, target: `127.0.0.1:${bound}`, stop: () => gateway.close(200) }
}

/** A host whose reported state the test sets. */
export class TestHost implements AgentHost {
  state: HostSnapshot = { binary_version: '1.0.0', process_state: 'running', restarts_in_window: 0, sync_status: 'syncing', metrics: { block_height: 1 } }
  async snapshot(): Promise<HostSnapshot> {
    return { ...this.state, metrics: { ...this.state.metrics } }
  }
}

export function startClient(
  target: string,
  nodeId: string,
  token: string,
  runner: CommandRunner,
  overrides: Partial<AgentClientOptions> = {},
): { client: AgentClient; host: TestHost; fatal: string[]; publicKey: Uint8Array } {
  const host = new TestHost()
  const fatal: string[] = []
  const { publicKey } = generateBoxKeyPair()
  const client = new AgentClient({
    target,
    ca: devTls().ca,
    nodeId,
    token,
    agentVersion: '0.1.0-test',
    publicKey,
    host,
    runner,
    logger: quiet,
    heartbeatIntervalMs: 40,
    progressCheckIntervalMs: 40,
    reconnect: { initialMs: 30, maxMs: 200 },
    onFatal: (reason) => fatal.push(reason),
    ...overrides,
  })
  return { client, host, fatal, publicKey }
}

export function otherCa(): Buffer {
  return fs.readFileSync(ensureDevCertificates(path.join(tempDir('nodeplane-tls-other-'), 'ca')).caFile)
}
