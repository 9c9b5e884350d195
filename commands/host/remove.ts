import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostRemove extends BaseCommand<typeof HostRemove> {
  static override summary = 'Remove a host from the fleet and delete its SSH key'
  static override description =
    'Only a host with no nodes on it (exit 4 otherwise: drain it first). Its name is free again; `host show --host ID` still shows it as removed. Asks for confirmation on a terminal unless --yes. Needs an admin key.'
  static override examples = ['<%= config.bin %> host remove --host fra-1 --yes']
  static override flags = { host: Flags.string({ description: 'host name, or id', required: true }), yes: yesFlag, 'api-url': apiUrlFlag }

  async run(): Promise<Host> {
    await confirmDestructive(`Remove host ${this.flags.host} from the fleet and delete its SSH key?`, this.flags.yes)
    const host = await hostAction(apiClientFor(this.env(), this.flags['api-url']), this.flags.host, 'remove')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'remove'))
    return host
  }
}
