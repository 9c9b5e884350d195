import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { NotFoundError } from '../../src/errors.js'
import type { InputView } from '../../src/subscriptions/inputs.js'

export interface SubscriptionInputs {
  subscription_id: string
  inputs: InputView[]
  missing_required: string[]
}

export default class SubscriptionInputsCommand extends BaseCommand<typeof SubscriptionInputsCommand> {
  static override summary = "List a subscription's provisioning inputs (secrets as metadata only) and the required ones still missing"
  static override description = 'Through the API (scope subscriptions:read). An unknown id, or a subscription that is not yours, exits 3.'
  static override examples = [
    '<%= config.bin %> subscription inputs 0193a1b2-…',
    '<%= config.bin %> subscription inputs "$SUB" --json | jq -r ".missing_required[]"',
  ]
  static override args = { id: subjectArg('subscription') }
  static override flags = {
    id: subjectFlag('subscription', ['subscription']),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SubscriptionInputs> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'subscription', this.subject('subscription'))
    const result = await api.get<SubscriptionInputs>(`/subscriptions/${encodeURIComponent(id)}/inputs`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no subscription ${id} among your subscriptions`)
      throw err
    })
    if (!this.jsonEnabled()) {
      this.log(result.inputs.length === 0 ? 'No inputs submitted yet.' : renderInputs(result.inputs))
      if (result.missing_required.length > 0) this.log(`Missing required inputs: ${result.missing_required.join(', ')}`)
    }
    return result
  }
}

function renderInputs(inputs: readonly InputView[]): string {
  return renderTable(inputs, [
    { header: 'name', value: (i) => i.name },
    { header: 'type', value: (i) => (i.source ? `${i.type} (${i.source})` : i.type) },
    { header: 'status', value: (i) => i.status },
    { header: 'value', value: (i) => (i.type === 'secret' ? '(sealed)' : truncate(i.value ?? '-', 60)) },
    { header: 'set at', value: (i) => age(i.set_at) },
  ])
}

function truncate(text: string, max: number): string {
  const line = text.replace(/\s+/g, ' ')
  return line.length > max ? `${line.slice(0, max - 1)}…` : line
}
