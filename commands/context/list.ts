import { BaseCommand } from '../../src/cli/base-command.js'
import { credentialsPath, readCredentialsFile, requestedContext } from '../../src/cli/credentials.js'
import { renderTable } from '../../src/cli/display.js'

export interface ContextItem {
  name: string
  api_url: string
  current: boolean
}

export default class ContextList extends BaseCommand<typeof ContextList> {
  static override summary = 'List the stored logins (contexts): name, API URL, which one is current'
  static override description = 'Never shows a key. The current context is the one commands use without --context or $NODEPLANE_CONTEXT.'
  static override examples = ['<%= config.bin %> context list', "<%= config.bin %> context ls --json | jq -r '.contexts[].name'"]
  static override aliases = ['context:ls']

  async run(): Promise<{ credentials_file: string; current_context: string | null; contexts: ContextItem[] }> {
    const env = this.env()
    const stored = readCredentialsFile(env)
    const current = stored?.current_context ?? null
    const inUse = requestedContext(env) ?? current
    const contexts = Object.entries(stored?.contexts ?? {})
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, login]) => ({ name, api_url: login.api_url, current: name === current }))
    if (!this.jsonEnabled()) {
      if (contexts.length === 0) this.log('No stored logins; add one with `nodeplane login --context NAME --api-url URL`.')
      else this.log(renderTable(contexts, [
        { header: 'CURRENT', value: (c) => (c.name === inUse ? '*' : '') },
        { header: 'NAME', value: (c) => c.name },
        { header: 'API URL', value: (c) => c.api_url },
      ]).trimEnd())
    }
    return { credentials_file: credentialsPath(env), current_context: current, contexts }
  }
}
