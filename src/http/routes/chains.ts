/**
 * `GET /api/v1/chains` (scope `chains:read`; issue 6, "Chain catalogue"; docs/http.md): what a
 * user can subscribe to, from the catalogue current at the request. Placement (provider, region,
 * instance types), artifact URLs, checksums and templates are internal and in no answer.
 */
import type { ChainSource } from '../../config/chain-source.js'
import { defaultConfigDir, DURATIONS, loadChainCatalogue, type ChainCatalogue, type ChainProfile } from '../../config/chains.js'
import { INPUT_PHASES, INPUT_TYPES } from '../../secrets/input-specs.js'
import { KEY_SOURCES } from '../../secrets/node-keys.js'
import { defineRoute, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface ChainRouteDeps {
  /** The catalogue source; absent: the package's own `chains/`, loaded on first use. */
  chains?: ChainSource
}

/**
 * Reads the current catalogue at each call: the source's, or the package's one loaded on first
 * use (a failed load is retried next time).
 */
export function currentCatalogue(chains: ChainSource | undefined): () => Promise<ChainCatalogue> {
  if (chains) return () => Promise.resolve(chains.current())
  let loading: Promise<ChainCatalogue> | undefined
  return () => {
    loading ??= loadChainCatalogue(defaultConfigDir()).catch((err: unknown) => {
      loading = undefined
      throw err
    })
    return loading
  }
}

const chainInput = z
  .object({
    name: z.string().openapi({ example: 'validator_key' }),
    type: z.enum(INPUT_TYPES),
    required: z.boolean(),
    phase: z.enum(INPUT_PHASES),
    source: z.enum(KEY_SOURCES).nullable().openapi({ description: 'Secrets only' }),
    key_type: z.string().nullable().openapi({ description: 'Secrets only, e.g. ed25519', example: 'ed25519' }),
  })
  .openapi('ChainInput')

const chainView = z
  .object({
    id: z.string().openapi({ description: 'The chain_profile_id of subscriptions and nodes', example: 'devnet' }),
    name: z.string(),
    description: z.string().nullable(),
    node_types: z.array(z.string()).openapi({ example: ['full', 'archive'] }),
    durations: z.array(z.enum(DURATIONS)).openapi({ description: 'Durations this chain is offered for', example: ['1w', '1m'] }),
    default_version: z.string().openapi({ description: 'The release new nodes get', example: '1.1.0' }),
    versions: z.array(z.string()).openapi({ description: 'Every release version', example: ['1.0.0', '1.1.0'] }),
    unavailable_versions: z.array(z.string()).openapi({
      description: "Releases whose binary is not installed on the control plane's hosts (an optional npm dependency or a Debian package missing, docs/chains.md): a node cannot be given one until it is installed",
      example: [],
    }),
    inputs: z.array(chainInput).openapi({ description: 'Provisioning inputs (POST /api/v1/subscriptions/{id}/inputs)' }),
  })
  .openapi('Chain')

const catalogueView = z
  .object({
    version: z.string().openapi({ description: 'The catalogue version: the pinned tag, or for latest a content hash that changes with any profile', example: 'sha256:3f2a9c1e0b7d4a65' }),
    chains: z.array(chainView),
  })
  .openapi('ChainCatalogue')

export type ChainCatalogueView = z.infer<typeof catalogueView>

export function chainSummary(profile: ChainProfile): z.infer<typeof chainView> {
  return {
    id: profile.id,
    name: profile.name,
    description: profile.description ?? null,
    node_types: Object.keys(profile.node_types),
    durations: DURATIONS.filter((d) => profile.durations[d] !== undefined),
    default_version: profile.default_version,
    versions: profile.releases.map((r) => r.version),
    unavailable_versions: profile.releases.filter((r) => r.unavailable !== undefined).map((r) => r.version),
    inputs: profile.inputs.map((i) => ({ name: i.name, type: i.type, required: i.required, phase: i.phase, source: i.source ?? null, key_type: i.key_type ?? null })),
  }
}

export function chainRoutes(deps: ChainRouteDeps): ApiRoute[] {
  const catalogue = currentCatalogue(deps.chains)
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/chains',
      summary: 'The chains on offer: node types, durations, release versions and provisioning inputs of each',
      tags: ['chains'],
      auth: { scope: 'chains:read' },
      responses: { 200: catalogueView },
    }).handle(async () => {
      // One snapshot per request: a catalogue swapped meanwhile shows in the next request, never half in this one.
      const snapshot = await catalogue()
      const chains = [...snapshot.profiles.values()].sort((a, b) => a.id.localeCompare(b.id)).map(chainSummary)
      return { status: 200, body: { version: snapshot.version, chains } }
    }),
  ]
}
