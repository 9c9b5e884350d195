import * as Flags from '@oclif/core/flags'
import { requireArtifact, toArtifactView, type ArtifactView } from '../../src/artifacts/service.js'
import { describeArtifact } from '../../src/cli/artifact-views.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'

export default class ArtifactShow extends BaseCommand<typeof ArtifactShow> {
  static override summary = 'Show one stored artifact: digest, size, signature and signing key'
  static override description = 'An unknown binary or version exits 3.'
  static override examples = ['<%= config.bin %> artifact show --binary anvil --version 1.7.1', '<%= config.bin %> artifact show --binary anvil --version 1.7.1 --json | jq -r .sha256']
  static override flags = {
    binary: Flags.string({ description: 'binary name', required: true }),
    version: Flags.string({ description: 'version', required: true }),
  }

  async run(): Promise<ArtifactView> {
    const view = toArtifactView(await withControlPlaneDatabase(this.env(), (db) => requireArtifact(db, this.flags.binary, this.flags.version)))
    if (!this.jsonEnabled()) this.log(describeArtifact(view))
    return view
  }
}
