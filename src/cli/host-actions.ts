/** The `host cordon|uncordon|drain|remove` commands share this: one API call on one host, one line of output. */
import type { ApiClient } from './api-client.js'
import { hostNotFound } from './host-views.js'
import type { Host } from '../hosts/store.js'

export type HostCommandAction = 'cordon' | 'uncordon' | 'drain' | 'remove'

export async function hostAction(api: ApiClient, ref: string, action: HostCommandAction): Promise<Host> {
  const path = `/hosts/${encodeURIComponent(ref)}`
  const call = action === 'remove' ? api.request<Host>({ method: 'DELETE', path }) : api.post<Host>(`${path}/${action}`)
  return call.catch(hostNotFound(ref))
}

export function describeHostAction(host: Host, action: HostCommandAction): string {
  if (action === 'drain' && host.state === 'draining') return `Host ${host.name} is draining: it takes no new nodes; its nodes are still on it.`
  if (action === 'drain') return `Host ${host.name} is drained (no node on it) and now cordoned.`
  if (action === 'remove') return `Removed host ${host.name}; its SSH key was deleted from the key directory.`
  return `Host ${host.name} is ${host.state}.`
}
