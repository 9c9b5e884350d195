/**
 * The `local` provider's hosts of a data directory (docs/infrastructure.md): detached node agents
 * and their chains, which outlive `nodeplane up` on purpose (a restart of the stack does not take
 * the nodes down). `nodeplane up` says on exit which still run; `nodeplane down` stops them.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from '../log.js'
import { LocalInfrastructureProvider } from '../provisioning/infrastructure/local.js'

export interface RunningLocalHost {
  host_id: string
  node_id: string
  pid: number
}

export function localHostsRoot(settings: { LOCAL_HOSTS_DIR?: string | undefined; NODEPLANE_DATA_DIR: string }): string {
  return settings.LOCAL_HOSTS_DIR ?? path.join(settings.NODEPLANE_DATA_DIR, 'hosts')
}

/** The provider over an existing hosts directory; undefined when there is none (nothing is created). */
export function existingLocalHosts(root: string, logger: Logger): LocalInfrastructureProvider | undefined {
  return fs.existsSync(root) ? new LocalInfrastructureProvider({ root, logger }) : undefined
}

export function runningLocalHosts(root: string, logger: Logger): RunningLocalHost[] {
  return existingLocalHosts(root, logger)?.runningHosts() ?? []
}
