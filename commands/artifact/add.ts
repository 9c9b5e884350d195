import fs from 'node:fs'
import * as Args from '@oclif/core/args'
import * as Flags from '@oclif/core/flags'
import { artifactCommandConfig } from '../../src/artifacts/config.js'
import { addArtifact, toArtifactView, type ArtifactView, type Signing } from '../../src/artifacts/service.js'
import { parsePublicKey, readPrivateKeyFile } from '../../src/artifacts/signing.js'
import { describeArtifact } from '../../src/cli/artifact-views.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { ValidationError } from '../../src/errors.js'

export default class ArtifactAdd extends BaseCommand<typeof ArtifactAdd> {
  static override summary = 'Store a binary in the artifact store as a release (binary and version), signed'
  static override description =
    'The file is stored by its SHA-256 in <data dir>/artifacts and recorded in the control-plane database (DATABASE_URL). Sign it with --key (the private key file from `artifact keygen`), or give --signature (from `artifact sign`, made offline), which must verify against --public-key or ARTIFACT_RELEASE_PUBLIC_KEYS; --unsigned stores it unsigned, and rollouts then refuse it. A stored binary and version is a conflict (exit 4).'
  static override examples = [
    '<%= config.bin %> artifact add ./anvil --binary anvil --version 1.7.1 --key /media/offline/release.key',
    '<%= config.bin %> artifact add ./anvil --binary anvil --version 1.7.1 --signature "$(cat anvil-1.7.1.sig)" --json',
  ]
  static override args = { file: Args.string({ description: 'the binary to store', required: true }) }
  static override flags = {
    binary: Flags.string({ description: "binary name (the chain profile's binary_name)", required: true }),
    version: Flags.string({ description: 'release version', required: true }),
    key: Flags.string({ description: 'private release key file to sign with (`artifact keygen`)', exclusive: ['signature', 'unsigned'] }),
    signature: Flags.string({ description: 'detached signature: base64 (from `artifact sign`) or a file holding it', exclusive: ['key', 'unsigned'] }),
    'public-key': Flags.string({ description: 'a release public key (.pub file or base64) to check --signature against, besides ARTIFACT_RELEASE_PUBLIC_KEYS', multiple: true, dependsOn: ['signature'] }),
    unsigned: Flags.boolean({ description: 'store it without a signature (rollouts refuse it until it is added signed)', exclusive: ['key', 'signature'] }),
  }

  async run(): Promise<ArtifactView> {
    const { blobs, releaseKeys } = artifactCommandConfig(this.env())
    const signing = this.#signing(releaseKeys)
    const record = await withControlPlaneDatabase(this.env(), (db) =>
      addArtifact(db, blobs, { file: this.args.file, binaryName: this.flags.binary, version: this.flags.version, signing, now: new Date() }),
    )
    const view = toArtifactView(record)
    if (!this.jsonEnabled()) this.log(`Stored ${describeArtifact(view)}`)
    return view
  }

  #signing(releaseKeys: ReturnType<typeof artifactCommandConfig>['releaseKeys']): Signing {
    if (this.flags.key !== undefined) return { kind: 'key', key: readPrivateKeyFile(this.flags.key) }
    if (this.flags.signature !== undefined) {
      const given = this.flags.signature
      const signature = fs.existsSync(given) ? fs.readFileSync(given, 'utf8').trim() : given
      const extra = (this.flags['public-key'] ?? []).map((value) => {
        const text = fs.existsSync(value) ? fs.readFileSync(value, 'utf8') : value
        const key = parsePublicKey(text)
        if (!key) throw new ValidationError(`--public-key ${value}: not a base64 Ed25519 public key`, 'give the .pub file from `artifact keygen` or its line')
        return key
      })
      return { kind: 'detached', signature, trusted: [...releaseKeys, ...extra] }
    }
    if (this.flags.unsigned) return { kind: 'unsigned' }
    throw new ValidationError('say how the artifact is signed: --key FILE, --signature SIG, or --unsigned', 'make a release key with `nodeplane artifact keygen --out release.key`')
  }
}
