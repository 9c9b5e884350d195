/** Human output of the `host` commands (the `--json` output is the commands' return value). */
import { NotFoundError } from '../errors.js'
import type { Host } from '../hosts/store.js'
import { renderTable } from './display.js'
import { age, moment } from './human-time.js'

function size(bytes: number): string {
  for (const [unit, factor] of [['TiB', 2 ** 40], ['GiB', 2 ** 30], ['MiB', 2 ** 20]] as const) {
    if (bytes >= factor) return `${Number((bytes / factor).toFixed(1))}${unit}`
  }
  return `${bytes}B`
}

export function capacityText(h: Pick<Host, 'capacity'>): string {
  return `cpu=${h.capacity.cpu},memory=${size(h.capacity.memory_bytes)},disk=${size(h.capacity.disk_bytes)}`
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

export function describeHost(h: Host): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(14)}${value}`
  return [
    `host ${h.name} (${h.id})`,
    line('state', h.state),
    line('address', `${h.user}@${h.address}:${h.port}`),
    line('region', h.region),
    line('root dir', h.root_dir),
    line('capacity', capacityText(h)),
    line('labels', labelsText(h.labels)),
    line('host key', h.host_key_fingerprint),
    line('last probe', h.last_probe_at ? `${h.last_probe_result ?? '-'} ${moment(h.last_probe_at)}${h.last_probe_error ? `: ${h.last_probe_error}` : ''}` : '-'),
    line('added', moment(h.created_at)),
    ...(h.removed_at ? [line('removed', moment(h.removed_at))] : []),
  ].join('\n')
}

/** An API 404 for one host, said as a person needs it (exit 3 stays). */
export function hostNotFound(ref: string): (err: unknown) => never {
  return (err) => {
    if (err instanceof NotFoundError) throw new NotFoundError(`no host ${ref}`, 'list them with `nodeplane host list`')
    throw err
  }
}
