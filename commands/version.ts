import { BaseCommand } from '../src/cli/base-command.js'

export interface VersionInfo {
  version: string
  node: string
  platform: string
  arch: string
}

export default class Version extends BaseCommand<typeof Version> {
  static override summary = 'The version of nodeplane, and the Node.js and platform it runs on (also -v and --version)'
  static override examples = ['<%= config.bin %> version', '<%= config.bin %> -v', '<%= config.bin %> version --json | jq -r .version']

  async run(): Promise<VersionInfo> {
    const info: VersionInfo = { version: this.config.version, node: process.version, platform: process.platform, arch: process.arch }
    if (!this.jsonEnabled()) this.log(this.config.userAgent)
    return info
  }
}
