import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../src/cli/base-command.js'
import { currentDataDir } from '../src/cli/local-stack.js'
import { localHostsRoot, runningLocalHosts, type RunningLocalHost } from '../src/daemon/local-hosts.js'
import { stopLocalHosts, stopStack } from '../src/daemon/stack-stop.js'
import { parseDuration } from '../src/config/duration.js'
import { createLogger } from '../src/log.js'
import { ValidationError } from '../src/errors.js'

export interface DownResult {
  data_dir: string
  stack: { pid: number; api_url: string } | null
  stale_stack_file: boolean
  hosts_stopped: RunningLocalHost[]
  hosts_kept: RunningLocalHost[]
}

export default class Down extends BaseCommand<typeof Down> {
  static override summary = 'Stop the `nodeplane up` of this data directory and the local hosts (node agents and chains) it started'
  static override description = [
    'Finds the stack through <data dir>/stack.json, sends it SIGTERM and waits until it has stopped (it drains within SHUTDOWN_TIMEOUT); then stops every local host under <data dir>/hosts (LOCAL_HOSTS_DIR), which outlive `up` on purpose. Their directories, with the chains\' data, stay.',
    'Nothing running is not an error (exit 0). Exit 1 when the stack did not stop within --timeout, 4 when stack.json names a pid that is no longer a nodeplane up.',
  ].join('\n')
  static override examples = ['<%= config.bin %> down', '<%= config.bin %> down --data-dir /tmp/np --json', '<%= config.bin %> down --keep-hosts   # the nodes keep running; the next `up` takes them back']
  static override flags = {
    'keep-hosts': Flags.boolean({ description: 'leave the local hosts (agents and chains) running' }),
    timeout: Flags.string({ description: 'how long to wait for the stack to stop (a duration)', default: '30s' }),
  }

  async run(): Promise<DownResult> {
    const env = this.env()
    const timeoutMs = parseDuration(this.flags.timeout)
    if (timeoutMs === null) throw new ValidationError(`--timeout: "${this.flags.timeout.slice(0, 40)}" is not a duration such as 30s or 2m`)
    const dataDir = currentDataDir(env)
    const logger = createLogger({ level: 'warn', destination: process.stderr })
    const stopped = await stopStack(dataDir, timeoutMs)
    const root = localHostsRoot({ LOCAL_HOSTS_DIR: env.LOCAL_HOSTS_DIR, NODEPLANE_DATA_DIR: dataDir })
    const hostsStopped = this.flags['keep-hosts'] ? [] : await stopLocalHosts(root, logger)
    const hostsKept = this.flags['keep-hosts'] ? runningLocalHosts(root, logger) : []
    const result: DownResult = { data_dir: dataDir, ...stopped, hosts_stopped: hostsStopped, hosts_kept: hostsKept }
    if (!this.jsonEnabled()) this.log(describe(result))
    return result
  }
}

function describe(result: DownResult): string {
  const lines: string[] = []
  if (result.stack) lines.push(`Stopped nodeplane up (pid ${result.stack.pid}, ${result.stack.api_url}) for ${result.data_dir}.`)
  else lines.push(`No nodeplane up was running for ${result.data_dir}${result.stale_stack_file ? ' (removed the stack.json a crashed one left)' : ''}.`)
  if (result.hosts_stopped.length > 0) lines.push(`Stopped ${result.hosts_stopped.length} local host(s): ${result.hosts_stopped.map((h) => h.host_id).join(', ')}.`)
  if (result.hosts_kept.length > 0) lines.push(`Left running: ${result.hosts_kept.map((h) => h.host_id).join(', ')} (\`nodeplane down\` without --keep-hosts stops them).`)
  return lines.join('\n')
}
