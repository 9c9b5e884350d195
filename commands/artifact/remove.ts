import * as Flags from '@oclif/core/flags'
import { artifactCommandConfig } from '../../src/artifacts/config.js'
import { removeArtifact, toArtifactView, type ArtifactView } from '../../src/artifacts/service.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { yesFlag } from '../../src/cli/api-flags.js'

export default class ArtifactRemove extends BaseCommand<typeof ArtifactRemove> {
  static override summary = 'Remove an artifact from the store (its bytes too, unless another version has the same)'
  static override description = 'Asks on a terminal unless --yes (without a terminal, --yes is required). An unknown binary or version exits 3.'
  static override examples = ['<%= config.bin %> artifact remove --binary anvil --version 1.4.4 --yes']
  static override flags = {
    binary: Flags.string({ description: 'binary name', required: true }),
    version: Flags.string({ description: 'version', required: true }),
    yes: yesFlag,
  }

  async run(): Promise<ArtifactView> {
    const { blobs } = artifactCommandConfig(this.env())
    await confirmDestructive(this.flags.yes, () => ({ action: `remove ${this.flags.binary} ${this.flags.version} from the artifact store`, consequence: 'Rollouts can no longer install it' }))
    const record = await withControlPlaneDatabase(this.env(), (db) => removeArtifact(db, blobs, this.flags.binary, this.flags.version))
    const view = toArtifactView(record)
    if (!this.jsonEnabled()) this.log(`Removed ${view.binary_name} ${view.version} (${view.sha256}) from the artifact store`)
    return view
  }
}
