import fs from 'node:fs'
import path from 'node:path'
import * as Flags from '@oclif/core/flags'
import { generateReleaseKey, privateKeyFileText } from '../../src/artifacts/signing.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { ConflictError, ValidationError } from '../../src/errors.js'

export interface ReleaseKeyView {
  key_id: string
  /** base64: the value for ARTIFACT_RELEASE_PUBLIC_KEYS and the agents' release keys. */
  public_key: string
  private_key_file: string
  public_key_file: string
}

export default class ArtifactKeygen extends BaseCommand<typeof ArtifactKeygen> {
  static override summary = 'Make an Ed25519 release key pair: a private key file (keep it offline) and its .pub'
  static override description =
    'The private key signs artifacts (`artifact add --key`, `artifact sign`); it never goes to a server. The public key (the .pub line) is what the control plane (ARTIFACT_RELEASE_PUBLIC_KEYS) and the node agents are configured with. An existing file is never overwritten (exit 4).'
  static override examples = ['<%= config.bin %> artifact keygen --out /media/offline/release.key', '<%= config.bin %> artifact keygen --out release.key --json | jq -r .public_key']
  static override flags = {
    out: Flags.string({ description: 'the private key file to write (mode 0600); the public key goes to <out>.pub', required: true }),
  }

  async run(): Promise<ReleaseKeyView> {
    const privateFile = path.resolve(this.flags.out)
    const publicFile = `${privateFile}.pub`
    for (const file of [privateFile, publicFile]) {
      if (fs.existsSync(file)) throw new ConflictError(`${file} already exists`, 'a release key is never overwritten: choose another --out')
    }
    if (!fs.existsSync(path.dirname(privateFile))) throw new ValidationError(`no directory ${path.dirname(privateFile)}`, 'create it first')
    const pair = generateReleaseKey()
    fs.writeFileSync(privateFile, privateKeyFileText(pair), { mode: 0o600, flag: 'wx' })
    fs.writeFileSync(publicFile, `${pair.public_key}\n`, { mode: 0o644, flag: 'wx' })
    const view = { key_id: pair.key_id, public_key: pair.public_key, private_key_file: privateFile, public_key_file: publicFile }
    if (!this.jsonEnabled()) {
      this.log(`Release key ${pair.key_id}: private key ${privateFile} (keep it offline), public key ${publicFile}`)
      this.log(`Public key: ${pair.public_key}`)
    }
    return view
  }
}
