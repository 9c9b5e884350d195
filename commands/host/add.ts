import fs from 'node:fs'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHost } from '../../src/cli/host-views.js'
import { ValidationError } from '../../src/errors.js'
import { parseCapacity, parseLabels } from '../../src/hosts/capacity.js'
import { DEFAULT_ROOT_DIR } from '../../src/hosts/service.js'
import { MAX_PRIVATE_KEY_BYTES, validatePrivateKey } from '../../src/hosts/ssh-keys.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostAdd extends BaseCommand<typeof HostAdd> {
  static override summary = 'Add a host to the fleet: the api-server connects over SSH, pins its host key and checks its prerequisites'
  static override description =
    'The key file is sent once to the api-server, which keeps it in its SSH key directory (HOSTS_SSH_KEY_DIR, mode 0600) and never shows it again. Nothing is recorded when the host cannot be reached, refuses the key, presents another host key than --host-key-fingerprint, or lacks Node.js >= 20.19, a writable root directory or free disk: the error says which (exit 2). An existing name exits 4. Needs an admin key.'
  static override examples = [
    '<%= config.bin %> host add --name fra-1 --address 10.0.4.11 --user nodeplane --ssh-key-file ~/.ssh/fleet --region eu-central --capacity cpu=8,memory=32GiB,disk=500GiB',
    '<%= config.bin %> host add --name fra-2 --address fra-2.internal --user nodeplane --ssh-key-file fleet.key --region eu-central --capacity cpu=16,memory=64GiB,disk=1TiB --labels rack=r12,disk=nvme --host-key-fingerprint "$(ssh-keygen -lf fra-2.pub | cut -d" " -f2)" --json',
  ]
  static override flags = {
    name: Flags.string({ description: 'the host name (lowercase letters, digits, -)', required: true }),
    address: Flags.string({ description: 'IP address or DNS name the control plane reaches it on', required: true }),
    port: Flags.integer({ description: 'SSH port', default: 22, min: 1, max: 65535 }),
    user: Flags.string({ description: 'SSH user (owns the root directory)', required: true }),
    'ssh-key-file': Flags.string({ description: 'the SSH private key file (unencrypted)', required: true }),
    region: Flags.string({ description: 'region the host is in (chain profiles place nodes by region)', required: true }),
    capacity: Flags.string({ description: 'cpu=N,memory=SIZE,disk=SIZE (sizes like 32GiB, 500GB)', required: true }),
    labels: Flags.string({ description: 'k=v,k2=v2' }),
    'root-dir': Flags.string({ description: 'where node directories live on the host', default: DEFAULT_ROOT_DIR }),
    'host-key-fingerprint': Flags.string({ description: 'pin this SSH host key (SHA256:…, as ssh-keygen -lf prints it) instead of the one presented now' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Host> {
    const { flags } = this
    // Everything that can be checked here is, before the API is looked for.
    const capacity = parseCapacity(flags.capacity)
    const labels = flags.labels === undefined ? {} : parseLabels(flags.labels)
    const privateKey = readKeyFile(flags['ssh-key-file'])
    validatePrivateKey(privateKey, '--ssh-key-file')
    const api = apiClientFor(this.env(), flags['api-url'])
    const host = await api.post<Host>('/hosts', {
      name: flags.name,
      address: flags.address,
      port: flags.port,
      user: flags.user,
      ssh_private_key: privateKey,
      region: flags.region,
      root_dir: flags['root-dir'],
      capacity,
      labels,
      ...(flags['host-key-fingerprint'] !== undefined ? { host_key_fingerprint: flags['host-key-fingerprint'] } : {}),
    })
    if (!this.jsonEnabled()) this.log(`Added host ${host.name}; its SSH host key ${host.host_key_fingerprint} is pinned.\n${describeHost(host)}`)
    return host
  }
}

function readKeyFile(file: string): string {
  let stat: fs.Stats
  try {
    stat = fs.statSync(file)
  } catch {
    throw new ValidationError(`cannot read --ssh-key-file ${file}`, 'give the path of the SSH private key file')
  }
  if (!stat.isFile() || stat.size > MAX_PRIVATE_KEY_BYTES) throw new ValidationError(`--ssh-key-file ${file} is not an SSH private key`, `a key file is a regular file of at most ${MAX_PRIVATE_KEY_BYTES} bytes`)
  try {
    return fs.readFileSync(file, 'utf8')
  } catch {
    throw new ValidationError(`cannot read --ssh-key-file ${file}`, 'check the file is readable by you')
  }
}
