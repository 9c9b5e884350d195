import * as Args from '@oclif/core/args'
import * as Flags from '@oclif/core/flags'
import { identify } from '../../src/artifacts/service.js'
import { readPrivateKeyFile, signArtifact } from '../../src/artifacts/signing.js'
import { BaseCommand } from '../../src/cli/base-command.js'

export interface DetachedSignatureView {
  binary_name: string
  version: string
  sha256: string
  size_bytes: number
  key_id: string
  signature: string
}

export default class ArtifactSign extends BaseCommand<typeof ArtifactSign> {
  static override summary = 'Sign a file as a release (binary and version) with a release key, offline: prints the detached signature'
  static override description = 'Run where the private key is; give the printed signature to `artifact add --signature` on the control plane. Touches no database.'
  static override examples = ['<%= config.bin %> artifact sign ./anvil --binary anvil --version 1.7.1 --key /media/offline/release.key']
  static override args = { file: Args.string({ description: 'the binary to sign', required: true }) }
  static override flags = {
    binary: Flags.string({ description: 'binary name (the chain profile\'s binary_name)', required: true }),
    version: Flags.string({ description: 'release version', required: true }),
    key: Flags.string({ description: 'private key file from `artifact keygen`', required: true }),
  }

  async run(): Promise<DetachedSignatureView> {
    const key = readPrivateKeyFile(this.flags.key)
    const identity = await identify(this.args.file, this.flags.binary, this.flags.version)
    const view = { ...identity, sha256: `sha256:${identity.sha256}`, key_id: key.key_id, signature: signArtifact(identity, key.secretKey) }
    if (!this.jsonEnabled()) this.log(view.signature)
    return view
  }
}
