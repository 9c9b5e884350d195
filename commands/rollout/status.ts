import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { followRollout, rolloutIdFlag, watchFlags } from '../../src/cli/rollout-actions.js'
import { describeRollout, rolloutNotFound } from '../../src/cli/rollout-views.js'
import { parseInterval } from '../../src/cli/rollout-watch.js'
import type { RolloutDetailView } from '../../src/rollouts/views.js'

export default class RolloutStatus extends BaseCommand<typeof RolloutStatus> {
  static override summary = 'Show a rollout: status, why it is paused, counters, nodes per status, and what you can do next; --watch follows it'
  static override description = [
    'Without --watch, shows the rollout once and exits 0.',
    'With --watch, follows it until it ends or waits for an operator: on a terminal a live view (batches, each node\'s status and upgrade phase, counters, the canary gate, the next commands), otherwise one line per change. Exit 0 completed; 1 failed, cancelled or rolled back; 6 waiting for an operator (paused, a canary waiting for approval, never started). --json prints the final rollout.',
    'Needs the scope admin.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> rollout status "$ROLLOUT"',
    '<%= config.bin %> rollout status "$ROLLOUT" --watch',
    '<%= config.bin %> rollout status "$ROLLOUT" --watch --json > rollout.json; echo "exit $?"   # 0, 1 or 6',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    watch: Flags.boolean({ description: watchFlags.watch.description }),
    interval: watchFlags.interval,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutDetailView> {
    if (this.flags.watch) parseInterval(this.flags.interval)
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    if (this.flags.watch) return followRollout(api, id, { interval: this.flags.interval, json: this.jsonEnabled(), log: (line) => this.log(line) })
    const rollout = await api.get<RolloutDetailView>(`/rollouts/${encodeURIComponent(id)}`).catch(rolloutNotFound(id))
    if (!this.jsonEnabled()) this.log(describeRollout(rollout))
    return rollout
  }
}
