/**
 * What a node of an instance type needs on a fleet host (docs/infrastructure.md, "Instance
 * types"): cpu cores, memory and disk, reserved against the host's declared capacity when the
 * `ssh` provider places the node. A chain profile names the instance type (`node_types.<t>.
 * instance_type` or the duration's); the fleet's operator states what each one needs, in
 * HOSTS_INSTANCE_TYPES, on top of the built-in `ssh.small`, `ssh.medium` and `ssh.large`.
 */
import { parseCapacity } from './capacity.js'
import type { HostCapacity } from './store.js'

export type InstanceTypeNeeds = HostCapacity

const GiB = 2 ** 30

export const DEFAULT_INSTANCE_TYPES: Readonly<Record<string, InstanceTypeNeeds>> = {
  'ssh.small': { cpu: 1, memory_bytes: 2 * GiB, disk_bytes: 50 * GiB },
  'ssh.medium': { cpu: 2, memory_bytes: 8 * GiB, disk_bytes: 200 * GiB },
  'ssh.large': { cpu: 8, memory_bytes: 32 * GiB, disk_bytes: 1024 * GiB },
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * `name:cpu=N,memory=SIZE,disk=SIZE` entries separated by `;`, e.g.
 * `eth.full:cpu=4,memory=16GiB,disk=2TiB;eth.archive:cpu=8,memory=64GiB,disk=16TiB`. Returns the
 * built-in types with these added (a built-in name given again is replaced); throws a message
 * naming the entry at fault.
 */
export function parseInstanceTypes(text: string | undefined): Record<string, InstanceTypeNeeds> {
  const types: Record<string, InstanceTypeNeeds> = { ...DEFAULT_INSTANCE_TYPES }
  for (const entry of (text ?? '').split(';').map((e) => e.trim()).filter(Boolean)) {
    const colon = entry.indexOf(':')
    const name = colon > 0 ? entry.slice(0, colon).trim() : ''
    if (!NAME.test(name)) throw new Error(`"${entry}" is not name:cpu=N,memory=SIZE,disk=SIZE (a name of letters, digits, ".", "_", "-")`)
    try {
      types[name] = parseCapacity(entry.slice(colon + 1))
    } catch (err) {
      const details = (err as { details?: unknown }).details
      throw new Error(`${name}: ${typeof details === 'string' ? details.replace(/--capacity:? ?/g, '') : (err as Error).message}`)
    }
  }
  return types
}
