import { BaseCommand } from '../../src/cli/base-command.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { NotFoundError } from '../../src/errors.js'
import type { ReprovisionResult } from '../../src/subscriptions/provision-retry.js'

export default class SubscriptionReprovision extends BaseCommand<typeof SubscriptionReprovision> {
  static override summary = 'Provision a new node for an active subscription whose node failed (operator, through the API)'
  static override description =
    'For a paid subscription left without a node after its provisioning retries ran out (a provision_failed incident says so): starts a new node and its provision workflow, and gives it a fresh retry budget. An unknown id exits 3; a subscription that is not active, or that already has a live node, exits 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> subscription reprovision 0193a1b2-…',
    '<%= config.bin %> subscription reprovision "$SUB" --json | jq -r .workflow_run_id | xargs -I{} <%= config.bin %> workflow show {}',
  ]
  static override args = { id: subjectArg('subscription') }
  static override flags = {
    id: subjectFlag('subscription'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<ReprovisionResult> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'subscription', this.subject('subscription'))
    const result = await api.post<ReprovisionResult>(`/subscriptions/${encodeURIComponent(id)}/reprovision`, {}).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no subscription ${id}`, 'list them with `nodeplane subscription list` (an admin key lists every user\'s)')
      throw err
    })
    if (!this.jsonEnabled()) {
      const replaces = result.previous_node_id ? ` (replacing failed node ${result.previous_node_id})` : ''
      this.log(`Provisioning node ${result.node_id} for subscription ${result.subscription_id}${replaces}; follow it with \`nodeplane workflow show --id ${result.workflow_run_id}\`.`)
    }
    return result
  }
}
