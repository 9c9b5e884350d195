import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderApiKeys } from '../../src/cli/display.js'
import { listAll } from '../../src/cli/pages.js'
import type { ApiKeyItem } from '../../src/cli/views.js'

export default class ApiKeyList extends BaseCommand<typeof ApiKeyList> {
  static override summary = 'List your API keys (through the API): id, name, prefix, scopes, status, expiry, last use'
  static override description = 'Follows the pages to list them all, or stops after --limit keys. Never shows a key itself.'
  static override examples = ['<%= config.bin %> api-key list', "<%= config.bin %> api-key list --json | jq -r '.api_keys[] | select(.status == \"active\") | .id'"]
  static override aliases = ['api-key:ls']
  static override flags = {
    columns: columnsFlag,
    limit: Flags.integer({ description: 'list at most this many keys (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ api_keys: ApiKeyItem[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const apiKeys = await listAll<ApiKeyItem>(api, '/api-keys', this.flags.limit)
    if (!this.jsonEnabled()) this.log(renderApiKeys(apiKeys))
    return { api_keys: apiKeys }
  }
}
