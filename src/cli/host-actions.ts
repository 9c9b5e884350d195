/** The `host cordon|uncordon|drain|remove` commands share this: one API call on one host, one line of output. */
import type { ApiClient } from './api-client.js'
import { hostNotFound } from './host-views.js'
import { alreadyNote, type Changed } from './repeats.js'
import type { HostDetail } from '../hosts/service.js'
import type { Host } from '../hosts/store.js'

export type HostCommandAction = 'cordon' | 'uncordon' | 'drain' | 'remove'

/** `T`: what the route answers (cordon, uncordon, remove: the host with `changed`; drain: the host's detail). */
export async function hostAction<T extends Host = Changed<Host>>(api: ApiClient, ref: string, action: HostCommandAction): Promise<T> {
  const path = `/hosts/${encodeURIComponent(ref)}`
  const call = action === 'remove' ? api.request<T>({ method: 'DELETE', path }) : api.post<T>(`${path}/${action}`)
  return call.catch(hostNotFound(ref))
}

/** What `host drain` answered: cordoned at once, or a drain under way (or stopped) with its progress. */
export function describeDrain(host: HostDetail): string {
  if (host.state !== 'draining') return `Host ${host.name} is drained (no node on it) and now cordoned.`
  const drain = host.drain
  if (drain?.status === 'running') {
    return `Host ${host.name} is draining: ${drain.nodes_left} node(s) to move to other hosts, one at a time; it is cordoned when none is left. Follow it with \`nodeplane host show ${host.name}\`.`
  }
  return `Host ${host.name} is draining; its last drain ${drain ? `is ${drain.status}${drain.stop_reason ? `: ${drain.stop_reason}` : ''}` : 'did not start'}.`
}

export function describeHostAction(host: Changed<Host>, action: HostCommandAction): string {
  if (action === 'remove') return `Removed host ${host.name}; its SSH key was deleted from the key directory.`
  if (!host.changed) return alreadyNote(`Host ${host.name}`, host.state)
  return `Host ${host.name} is ${host.state}.`
}
