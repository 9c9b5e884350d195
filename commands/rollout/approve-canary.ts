import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutApproveCanary extends BaseCommand<typeof RolloutApproveCanary> {
  static override summary = 'Approve the canary of a breaking migration: the rest of the fleet follows'
  static override description =
    'Only while the rollout waits for it (status running, awaiting approve_canary; `rollout status` shows it); a breaking canary rollout past its canary batch is a repeat (exit 0, nothing changed); otherwise exit 4 (while paused: resume first). The breaking migration then reaches every node: asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout approve-canary "$ROLLOUT"',
    '<%= config.bin %> rollout approve-canary "$ROLLOUT" --yes --watch   # a script: then follow it to the end',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    ...watchFlags,
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledRolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    return runRolloutAction(api, 'approve-canary', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'The breaking migration goes on to every other node of the rollout' })
  }
}
