import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import type { ChainCatalogueView } from '../../src/http/routes/chains.js'

export default class ChainList extends BaseCommand<typeof ChainList> {
  static override summary = 'List the chains on offer (node types, durations, versions, inputs) through the API'
  static override description =
    "The catalogue the api-server uses now (CHAIN_PROFILE_VERSION), with its version. A release whose binary is not installed on the control plane's hosts (an optional npm dependency or a Debian package missing) is listed as unavailable (`unavailable_versions` in --json): nodes cannot get it until it is installed. Needs the scope chains:read."
  static override examples = [
    '<%= config.bin %> chain list',
    '<%= config.bin %> chain list --json | jq -r ".chains[] | select(.id == \\"devnet\\") | .versions[]"',
  ]
  static override aliases = ['chain:ls']
  static override flags = {
    columns: columnsFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<ChainCatalogueView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const catalogue = await api.get<ChainCatalogueView>('/chains')
    if (!this.jsonEnabled()) this.log(`${renderChains(catalogue)}\ncatalogue version ${catalogue.version}`)
    return catalogue
  }
}

function renderChains(catalogue: ChainCatalogueView): string {
  return renderTable(catalogue.chains, [
    { header: 'id', value: (c) => c.id },
    { header: 'name', value: (c) => c.name },
    { header: 'node types', value: (c) => c.node_types.join(', ') },
    { header: 'durations', value: (c) => c.durations.join(', ') },
    { header: 'versions', value: (c) => c.versions.map((v) => (v === c.default_version ? `${v} (default)` : v)).join(', ') },
    { header: 'unavailable', value: (c) => c.unavailable_versions.join(', ') || '-' },
    { header: 'inputs', value: (c) => c.inputs.map((i) => (i.required ? `${i.name}*` : i.name)).join(', ') || '-' },
  ])
}
