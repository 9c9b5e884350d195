/**
 * What the `ssh` provider's tests on namespace hosts share: the node-agent bundle built from the
 * sources (as `npm run build` builds it), a development CA whose gateway certificate covers the
 * root namespace's address the agents dial, a real agent-gateway listening there, and a look at
 * the processes inside a host's namespace.
 */
import { execFile, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import * as grpc from '@grpc/grpc-js'
import { AgentGateway } from '../../../src/agent-gateway/gateway.js'
import { ensureDevCertificates, readTlsMaterial, type TlsMaterial } from '../../../src/agent-gateway/tls.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { tempDir } from '../../helpers/cli.js'
import type { NetnsHost } from '../../helpers/netns.js'

const run = promisify(execFile)
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
export const quiet = createLogger({ level: 'silent' })

export interface FleetFiles {
  /** dist/agent/node-agent.mjs as the build makes it, from the current sources. */
  bundle: string
  tls: TlsMaterial
}

/** The bundle and a CA for a gateway on `gatewayAddress`; other hosts get a route to it over their own link. */
export async function prepareFleet(hosts: readonly NetnsHost[], gatewayAddress: string): Promise<FleetFiles> {
  for (const host of hosts) {
    if (host.gatewayAddress !== gatewayAddress) await run('ip', ['-n', host.namespace, 'route', 'add', `${gatewayAddress}/32`, 'via', host.gatewayAddress])
  }
  const dir = tempDir('nodeplane-ssh-fleet-')
  const bundle = path.join(dir, 'node-agent.mjs')
  await run(process.execPath, [path.join(root, 'scripts', 'agent-bundle.js'), path.join(root, 'daemons', 'node-agent-main.ts'), bundle])
  return { bundle, tls: readTlsMaterial(ensureDevCertificates(path.join(dir, 'ca'), ['localhost', '127.0.0.1', gatewayAddress])) }
}

/** A real agent-gateway on `address` (a root-namespace link address) with the fleet's certificate. */
export async function startFleetGateway(db: Db, address: string, tls: TlsMaterial): Promise<{ gateway: AgentGateway; target: string }> {
  const gateway = new AgentGateway({ db, logger: quiet, heartbeatIntervalSeconds: 1, progressCheckIntervalSeconds: 30, heartbeatFlushIntervalMs: 50, commandPollIntervalMs: 50, tokenRecheckMs: 250 })
  const port = await gateway.listen(address, 0, grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
  return { gateway, target: `${address}:${port}` }
}

/** Every process in the host's namespace whose command line or working directory names `needle`. */
export function processesOf(host: NetnsHost, needle: string): number[] {
  const pids = execFileSync('ip', ['netns', 'pids', host.namespace], { encoding: 'utf8' }).split(/\s+/).filter(Boolean).map(Number)
  return pids.filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle) || fs.readlinkSync(`/proc/${pid}/cwd`).includes(needle)
    } catch {
      return false
    }
  })
}

/** The detached supervision loops running in a node's directory. */
export function supervisionLoopsIn(host: NetnsHost, dir: string): number[] {
  return processesOf(host, path.basename(dir)).filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('run-agent.sh')
    } catch {
      return false
    }
  })
}
