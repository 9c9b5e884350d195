import * as Flags from '@oclif/core/flags'
import { listArtifacts, toArtifactView, type ArtifactView } from '../../src/artifacts/service.js'
import { renderArtifacts } from '../../src/cli/artifact-views.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { columnsFlag } from '../../src/cli/display.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'

export default class ArtifactList extends BaseCommand<typeof ArtifactList> {
  static override summary = 'List the artifact store: binary, version, digest, size, signing key'
  static override examples = ['<%= config.bin %> artifact list', "<%= config.bin %> artifact list --binary anvil --json | jq -r '.artifacts[].version'"]
  static override aliases = ['artifact:ls']
  static override flags = {
    columns: columnsFlag,
    binary: Flags.string({ description: 'only this binary' }),
  }

  async run(): Promise<{ artifacts: ArtifactView[] }> {
    const records = await withControlPlaneDatabase(this.env(), (db) => listArtifacts(db, this.flags.binary === undefined ? {} : { binaryName: this.flags.binary }))
    const artifacts = records.map(toArtifactView)
    if (!this.jsonEnabled()) this.log(renderArtifacts(artifacts))
    return { artifacts }
  }
}
