/** Human output of the `host` commands (the `--json` output is the commands' return value). */
import { NotFoundError } from '../errors.js'
import type { HostDetail } from '../hosts/service.js'
import type { Host, HostCapacity } from '../hosts/store.js'
import { renderTable, shortIds } from './display.js'
import { age, moment } from './human-time.js'

function size(bytes: number): string {
  for (const [unit, factor] of [['TiB', 2 ** 40], ['GiB', 2 ** 30], ['MiB', 2 ** 20]] as const) {
    if (bytes >= factor) return `${Number((bytes / factor).toFixed(1))}${unit}`
  }
  return `${bytes}B`
}

export function capacityText(h: Pick<Host, 'capacity'>): string {
  return resourcesText(h.capacity)
}

function resourcesText(c: HostCapacity): string {
  return `cpu=${c.cpu},memory=${size(c.memory_bytes)},disk=${size(c.disk_bytes)}`
}

function labelsText(labels: Record<string, string>): string {
  const entries = Object.entries(labels)
  return entries.length === 0 ? '-' : entries.map(([k, v]) => `${k}=${v}`).join(',')
}

export function renderHosts(hosts: readonly Host[]): string {
  return renderTable(hosts, [
    { header: 'name', value: (h) => h.name },
    { header: 'state', value: (h) => h.state, state: true },
    { header: 'region', value: (h) => h.region },
    { header: 'address', value: (h) => `${h.user}@${h.address}:${h.port}` },
    { header: 'capacity', value: (h) => capacityText(h) },
    { header: 'probe', value: (h) => `${h.last_probe_result ?? '-'} ${age(h.last_probe_at, { precise: true })}` },
    { header: 'labels', value: (h) => labelsText(h.labels) },
  ])
}

/** `host show`, and `host add` (a host without its detail: nothing is placed on it yet). */
export function describeHost(h: Host | HostDetail): string {
  const detail = 'reservations' in h ? h : null
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(14)}${value}`
  return [
    `host ${h.name} (${h.id})`,
    line('state', h.state),
    line('address', `${h.user}@${h.address}:${h.port}`),
    line('region', h.region),
    line('root dir', h.root_dir),
    line('capacity', capacityText(h)),
    ...(detail ? [line('used', `${resourcesText(detail.used)} (${detail.used.nodes} node${detail.used.nodes === 1 ? '' : 's'})`), line('free', resourcesText(detail.free))] : []),
    line('labels', labelsText(h.labels)),
    line('host key', h.host_key_fingerprint),
    line('last probe', h.last_probe_at ? `${h.last_probe_result ?? '-'} ${moment(h.last_probe_at)}${h.last_probe_error ? `: ${h.last_probe_error}` : ''}` : '-'),
    line('added', moment(h.created_at)),
    ...(h.removed_at ? [line('removed', moment(h.removed_at))] : []),
    ...(detail?.drain ? [line('drain', drainText(detail.drain, shortIds([detail.drain.current_node_id ?? '', detail.drain.stopped_at_node_id ?? ''])))] : []),
    ...(detail ? ['', detail.reservations.length === 0 ? 'No node is placed on this host.' : renderReservations(detail.reservations)] : []),
  ].join('\n')
}

function drainText(d: NonNullable<HostDetail['drain']>, short: Map<string, string>): string {
  const node = (id: string | null) => (id ? (short.get(id) ?? id) : '-')
  const counts = `${d.nodes_moved} moved, ${d.nodes_left} left`
  if (d.status === 'running') return `running, started ${age(d.started_at)}: ${counts}${d.current_node_id ? `; ${d.activity ?? `node ${node(d.current_node_id)}`}` : ''}`
  if (d.status === 'stopped') return `stopped at node ${node(d.stopped_at_node_id)} (${counts}): ${d.stop_reason ?? 'no reason recorded'}; drain again to continue`
  return `${d.status} ${age(d.finished_at)} (${counts})`
}

function renderReservations(rows: HostDetail['reservations']): string {
  return renderTable(rows, [
    { header: 'node', value: (r) => r.node_id, id: true },
    { header: 'instance type', value: (r) => r.instance_type },
    { header: 'rpc port', value: (r) => String(r.rpc_port) },
    { header: 'state', value: (r) => r.node_state ?? 'gone' },
    { header: 'reserved', value: (r) => resourcesText(r) },
  ])
}

/** An API 404 for one host, said as a person needs it (exit 3 stays). */
export function hostNotFound(ref: string): (err: unknown) => never {
  return (err) => {
    if (err instanceof NotFoundError) throw new NotFoundError(`no host ${ref}`, 'list them with `nodeplane host list`')
    throw err
  }
}
