import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { artifactFromFlags, artifactPath, rolloutRequest } from '../../src/cli/rollout-create.js'
import { describeRollout } from '../../src/cli/rollout-views.js'
import { MIGRATION_TYPES } from '../../src/rollouts/manifests.js'
import { ROLLOUT_STRATEGIES } from '../../src/rollouts/states.js'
import type { RolloutView } from '../../src/rollouts/views.js'
import type { ArtifactView } from '../../src/artifacts/service.js'

export default class RolloutCreate extends BaseCommand<typeof RolloutCreate> {
  static override summary = 'Create a pending rollout: from an upgrade manifest (--upgrade-id), a stored artifact (--artifact) or explicit binary flags'
  static override description = [
    'Auto mode: --upgrade-id names upgrades/<chain>/<upgrade-id>.yaml, which gives the binary, target version, artifact, checksum and migration type. Manual mode (no --upgrade-id): --artifact BINARY@VERSION names a stored, signed artifact (`nodeplane artifact add`), whose digest is read from the API (or pinned with --target-checksum); or --binary-name, --target-version and --target-checksum name one, and --target-url fetches from a URL instead of the store: only a release of the chain profile or a URL under a source the operator allowed (ARTIFACT_ALLOWED_SOURCES on the api-server); any other URL, a public host too, is refused (exit 2, docs/artifacts.md).',
    'Nothing runs until `nodeplane rollout start`. Defaults: strategy rolling, batch size 10, failure threshold 0.2, health wait 5m, canary size 1 (canary). Exit 2 for invalid input (nothing is created), 4 when the chain already has an active rollout or rollout group. Needs the scope admin.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> rollout create --chain devnet --node-type full --upgrade-id devnet-1.1.0 --source-version 1.0.0',
    '<%= config.bin %> rollout create --chain devnet --node-type full --upgrade-id devnet-1.1.0-breaking --source-version 1.0.0 --strategy canary --canary-size 2',
    '<%= config.bin %> rollout create --chain devnet --node-type full --source-version 1.0.0 --artifact devnet-node@1.2.0',
    '<%= config.bin %> rollout create --chain devnet --node-type full --source-version 1.0.0 --binary-name devnet-node --target-version 1.1.0 --target-url https://releases.example.com/devnet-node-1.1.0.mjs --target-checksum sha256:9479…  # with ARTIFACT_ALLOWED_SOURCES=https://releases.example.com/',
    'ROLLOUT=$(<%= config.bin %> rollout create --chain devnet --node-type full --upgrade-id devnet-1.1.0 --source-version 1.0.0 --json | jq -r .id)',
  ]
  static override flags = {
    chain: Flags.string({ description: 'chain profile id (`nodeplane chain list`)', required: true }),
    'node-type': Flags.string({ description: 'node type of the chain whose nodes are upgraded', required: true }),
    'source-version': Flags.string({ description: 'the version the nodes run now; only nodes running it are upgraded', required: true }),
    'upgrade-id': Flags.string({ description: 'auto mode: the upgrade manifest upgrades/<chain>/<upgrade-id>.yaml', helpGroup: 'AUTO MODE' }),
    artifact: Flags.string({ description: 'manual mode: a stored artifact, BINARY@VERSION (`nodeplane artifact list`); its digest comes from the API', helpGroup: 'MANUAL MODE' }),
    'binary-name': Flags.string({ description: 'manual mode: the binary replaced', helpGroup: 'MANUAL MODE' }),
    'target-version': Flags.string({ description: 'manual mode: the version afterwards', helpGroup: 'MANUAL MODE' }),
    'target-url': Flags.string({ description: 'manual mode: fetch the artifact from this URL instead of the artifact store; it must lie under ARTIFACT_ALLOWED_SOURCES or be a release of the chain profile', helpGroup: 'MANUAL MODE' }),
    'target-checksum': Flags.string({ description: 'manual mode: sha256:<64 hex> of the artifact (with --artifact: pins the stored bytes)', helpGroup: 'MANUAL MODE' }),
    'migration-type': Flags.string({ description: 'manual mode: breaking makes a canary wait for approve-canary (default non_breaking)', options: [...MIGRATION_TYPES], helpGroup: 'MANUAL MODE' }),
    strategy: Flags.string({ description: 'rolling (default), canary, or all_at_once', options: [...ROLLOUT_STRATEGIES] }),
    'batch-size': Flags.integer({ description: 'nodes upgraded at a time (default 10)', min: 1 }),
    'canary-size': Flags.integer({ description: 'canary strategy: nodes in the canary batch (default 1)', min: 1 }),
    'failure-threshold': Flags.string({ description: 'auto-pause once failed/attempted exceeds this fraction, 0.0-1.0 (default 0.2)' }),
    'health-wait': Flags.string({ description: 'how long an upgraded node must stay healthy, a duration from 1s to 24h (default 5m)' }),
    'scheduled-at': Flags.string({ description: 'ISO 8601 date-time: `rollout start` then schedules it for this time' }),
    reason: Flags.string({ description: 'why (kept with the rollout)' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView> {
    // Bad flags are refused before the API is even looked for.
    const artifact = artifactFromFlags(this.flags)
    const fromFlags = artifact ? undefined : rolloutRequest(this.flags)
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const stored = artifact && this.flags['target-checksum'] === undefined ? await api.get<ArtifactView>(artifactPath(artifact)) : undefined
    const body = fromFlags ?? rolloutRequest(this.flags, stored?.sha256)
    const rollout = await api.post<RolloutView>('/rollouts', body)
    if (!this.jsonEnabled()) this.log(`Created ${describeRollout(rollout)}`)
    return rollout
  }
}
