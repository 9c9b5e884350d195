import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { subjectArg, subjectsOf } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeFailure } from '../../src/cli/errors.js'
import { describeMove, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'
import type { Changed } from '../../src/cli/repeats.js'

export interface AckFailure {
  id: string
  error: { name: string; message: string; details?: string | undefined; exit_code: number }
}

export interface AckResult {
  /** Every incident now acknowledged; `changed: false` for one that already was (docs/cli.md, "Repeats"). */
  acknowledged: Changed<Incident>[]
  failed: AckFailure[]
}

export default class IncidentAck extends BaseCommand<typeof IncidentAck> {
  static override summary = 'Acknowledge one or more open incidents (someone is on it)'
  static override description =
    'Takes the ids as arguments (or --id, repeatable). Each id is acknowledged on its own: one that fails does not stop the others. Exit 0 when all are acknowledged (one that already was is said so, and changes nothing), else the exit code of the first failure (3 unknown or not yours, 4 resolved). An acknowledged incident still auto-resolves when the node recovers. Needs the scope nodes:write.'
  static override examples = [
    '<%= config.bin %> incident ack 0193a1b2',
    '<%= config.bin %> incident ack "$A" "$B" --json | jq ".failed"',
    'OPEN=$(<%= config.bin %> incident list --status open --json | jq -r \'.incidents[].id\'); [ -z "$OPEN" ] || <%= config.bin %> incident ack $OPEN',
  ]
  static override strict = false
  static override args = { id: subjectArg('incident (several may follow)') }
  static override flags = {
    id: Flags.string({ description: 'incident id (repeatable): the same as the arguments, for scripts', multiple: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AckResult> {
    const given = subjectsOf('incident', this.positionals, this.flags.id, `${this.usage()} ID…`)
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const result: AckResult = { acknowledged: [], failed: [] }
    for (const ref of given) {
      let id = ref
      try {
        id = await resolveApiId(api, 'incident', ref)
        // The API says whether this call moved it: of two acks at once, only one did.
        const incident = await api.post<Changed<Incident>>(`/incidents/${encodeURIComponent(id)}/acknowledge`, {}).catch(incidentNotFound(id))
        result.acknowledged.push(incident)
        if (!this.jsonEnabled()) this.log(describeMove(incident))
      } catch (err) {
        const failure = describeFailure(err)
        result.failed.push({ id, error: { name: failure.name, message: failure.message, details: failure.details, exit_code: failure.exitCode } })
        if (!this.jsonEnabled()) process.stderr.write(`Error: ${failure.message}\n`)
      }
    }
    const first = result.failed[0]
    if (first) process.exitCode = first.error.exit_code
    return result
  }
}
