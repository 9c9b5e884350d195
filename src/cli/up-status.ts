/** What `nodeplane up` tells a person: what runs where, the admin key, what to type next; and on exit, what keeps running. */
import type { RunningLocalHost } from '../daemon/local-hosts.js'
import type { StackFile } from '../daemon/stack-file.js'

export function renderUpStatus(stack: StackFile, options: { logFile: string | undefined; operator: string }): string {
  const rows: Array<[string, string]> = [
    ['API', stack.api_url],
    ['auth', stack.auth_url],
    ['rpc-gateway', stack.rpc_url ?? '-'],
    ['agent gateway', `${stack.agent_gateway ?? '-'} (gRPC, TLS)`],
    ['payment service', `${stack.payment_grpc ?? '-'} (gRPC, mutual TLS), webhooks ${stack.payment_http_url ?? '-'}, test provider`],
    ['events', stack.bus === 'nats' ? 'NATS (NATS_URL)' : 'in-process (set NATS_URL for NATS)'],
    ['database', stack.database_url],
    ['data', stack.data_dir],
    ['logs', options.logFile ?? 'stdout (JSON)'],
    ['admin key', `${stack.admin_api_key_file} (${options.operator}; commands run here use it)`],
  ]
  const width = Math.max(...rows.map(([name]) => name.length))
  return [
    `nodeplane is up (pid ${stack.pid})`,
    ...rows.map(([name, value]) => `  ${name.padEnd(width)}  ${value}`),
    'Next, in another terminal here:',
    '  nodeplane whoami',
    '  nodeplane chain list',
    '  nodeplane subscription create --chain devnet --node-type full --duration 1w',
    'Stop: Ctrl-C, or `nodeplane down` from this directory.',
  ].join('\n')
}

/** On exit: the local hosts (agents and their chains) still running, and how to stop them. */
export function renderHostsLeft(hosts: readonly RunningLocalHost[], dataDirFlag: string): string {
  if (hosts.length === 0) return 'nodeplane stopped; no local hosts are running.'
  const list = hosts.map((h) => `  ${h.host_id} (node ${h.node_id}, agent pid ${h.pid})`)
  return [
    `nodeplane stopped; ${hosts.length} local host${hosts.length === 1 ? '' : 's'} keep${hosts.length === 1 ? 's' : ''} running (agent and chain):`,
    ...list,
    `The next \`nodeplane up\` here takes them back; \`nodeplane down${dataDirFlag}\` stops them.`,
  ].join('\n')
}
