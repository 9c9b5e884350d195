/**
 * The chain catalogue: one `chains/<id>/profile.yaml` per chain in the config dir, or per chain
 * of a pinned version in `chain-catalogue/<tag>/<id>/profile.yaml` (format and layout in
 * docs/chains.md). Loading validates every profile, checks local release artifacts against
 * their SHA-256 and renders each node type once, so a profile that could not provision a node
 * stops start-up instead of failing a provisioning workflow later.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { bitcoinSyncPolicy, commandPayloads, crashLoopSpec, isChainWritablePath, keyExport, relativePath, sha256Hex, type CommandPayload, type KeyExport } from '../agent-gateway/protocol.js'
import { ConfigError, ValidationError } from '../errors.js'
import { sha256OfFile, sha256OfFileSync } from './file-digest.js'
import { healthPolicySchema } from './health-policy.js'
import { rpcPolicySchema } from './rpc-policy.js'
import { packageRoot } from '../package-root.js'
import { INPUT_PHASES, INPUT_TYPES, legacyKeysToInputSpecs, type InputSpec } from '../secrets/input-specs.js'
import { DURATIONS, type SubscriptionDuration } from './durations.js'

export { DURATIONS, type SubscriptionDuration }

/** Template variables every render provides; node types and profiles may add their own `vars`. */
export const BUILTIN_VARIABLES = ['rpc_port', 'rpc_host', 'node_id', 'node_type', 'version', 'chain_profile_id'] as const

const VARIABLE = /\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g

const identifier = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be lowercase letters, digits, "-" or "_" (at most 64)')
const label = z.string().min(1).max(100)
const variables = z.record(
  z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'variable names are letters, digits and "_"'),
  z.union([z.string().max(4096), z.number(), z.boolean()]).transform(String),
)

const placementSchema = z
  .object({
    provider: label,
    region: label,
    /** Overrides the node type's instance type for this duration. */
    instance_type: label.optional(),
    /** Per node type, overrides both of the above. */
    instance_types: z.record(z.string(), label).optional(),
  })
  .strict()

const releaseSchema = z
  .object({
    version: z.string({ invalid_type_error: 'must be a string (quote versions in YAML, e.g. "1.10")' }).min(1).max(64),
    /** A path relative to the profile's folder, or a file:// or http(s):// URL. */
    artifact: z.string().min(1).max(2048),
    sha256: sha256Hex,
    /**
     * The system package that installs the artifact (a file:// path outside the catalogue, e.g.
     * Debian's litecoind): when the file is missing or another build, the release is unavailable
     * (a node cannot be configured with it) instead of the whole catalogue refused.
     */
    package: z.string().regex(/^[a-z0-9][a-z0-9+.-]{0,99}$/, 'must be a Debian package name').optional(),
    /**
     * The npm dependency (package.json's name for it, e.g. the alias anvil-1.5.1) that puts the
     * artifact in node_modules/: an optional one may be absent (another platform), and the
     * release is then unavailable instead of the whole catalogue refused. Another build is
     * still refused: the lockfile pins exactly one.
     */
    npm_package: z.string().regex(/^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]{0,213}$/, 'must be an npm package name').optional(),
    /**
     * The release signature (`nodeplane artifact sign`, docs/artifacts.md): sent with the artifact,
     * so agents that require signed artifacts (AGENT_REQUIRE_SIGNED_ARTIFACTS) install it.
     */
    signature: z.string().regex(/^[A-Za-z0-9+/]{86}==$/, 'must be a base64 Ed25519 signature (the output of `nodeplane artifact sign`)').optional(),
  })
  .strict()

const probeTemplateSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('ethereum_jsonrpc'), url: z.string().min(1).max(2048), timeout_ms: z.number().int().optional(), startup_grace_ms: z.number().int().optional() }).strict(),
  z.object({ type: z.literal('command'), command: z.array(z.string().max(4096)).min(1).max(64), timeout_ms: z.number().int().optional(), startup_grace_ms: z.number().int().optional() }).strict(),
  z
    .object({
      type: z.literal('bitcoin_rpc'),
      url: z.string().min(1).max(2048),
      cookie_file: relativePath.optional(),
      sync_policy: bitcoinSyncPolicy.optional(),
      timeout_ms: z.number().int().optional(),
      startup_grace_ms: z.number().int().optional(),
    })
    .strict(),
])

/** Spec: "Provisioning input spec (declared per chain)". */
const inputSpecSchema = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'must be 1 to 100 letters, digits, ".", "_" or "-"'),
    type: z.enum(INPUT_TYPES),
    required: z.boolean().default(false),
    validation: z.string().min(1).max(1000).optional(),
    phase: z.enum(INPUT_PHASES).default('pre_provision'),
    source: z.enum(['generated', 'chain_generated', 'user_provided']).optional(),
    key_type: z.string().min(1).max(64).optional(),
    /** chain_generated: the file the chain writes, relative to the node's state directory (e.g. data/nodekey). */
    path: relativePath.optional(),
    /** chain_generated: how the agent has the chain write the key to `path` (a key the chain keeps inside itself). */
    export: keyExport.omit({ path: true }).optional(),
  })
  .strict()
  .superRefine((input, ctx) => {
    const problem = (field: string, message: string) => ctx.addIssue({ code: z.ZodIssueCode.custom, path: [field], message })
    if (input.validation !== undefined) {
      try {
        new RegExp(input.validation)
      } catch {
        problem('validation', 'is not a valid regular expression')
      }
    }
    if (input.type !== 'secret') {
      if (input.source || input.key_type || input.path) problem('type', `${input.type} inputs take no source, key_type or path (secrets only)`)
      return
    }
    if (!input.source) return problem('source', 'a secret needs a source: generated, chain_generated or user_provided')
    if (input.source === 'generated' && input.key_type !== 'ed25519' && input.key_type !== 'secp256k1') problem('key_type', 'a generated secret needs key_type ed25519 or secp256k1')
    if (input.source === 'chain_generated' && !input.path) problem('path', 'a chain_generated secret needs the path the chain writes it to')
    if (input.source === 'chain_generated' && input.path && !isChainWritablePath(input.path)) problem('path', 'must be a file under data/ or config/ (where the chain writes)')
    if (input.source !== 'chain_generated' && input.path) problem('path', 'only chain_generated secrets have a path')
    if (input.source !== 'chain_generated' && input.export) problem('export', 'only chain_generated secrets are exported by the chain')
    if (input.source !== 'user_provided' && input.validation) problem('validation', 'only text, proof and user_provided inputs are validated')
  })

export const chainProfileSchema = z
  .object({
    id: identifier,
    name: label,
    description: z.string().max(2000).optional(),
    binary_name: z.string().min(1).max(100).regex(/^[A-Za-z0-9._-]+$/, 'must be letters, digits, ".", "_" or "-"'),
    runtime: z.enum(['native', 'node']).default('native'),
    node_types: z.record(identifier, z.object({ instance_type: label, vars: variables.default({}) }).strict()),
    durations: z.record(z.enum(DURATIONS), placementSchema),
    default_version: z.string({ invalid_type_error: 'must be a string (quote versions in YAML)' }).min(1).max(64),
    releases: z.array(releaseSchema).min(1),
    vars: variables.default({}),
    config_files: z
      .array(
        z
          .object({
            // The agent replaces its config/ directory as a whole, so every rendered file lives there.
            path: relativePath.refine((p) => p.startsWith('config/'), 'must be inside config/ (e.g. config/node.json)'),
            template: z.string().max(1_000_000),
            mode: z.number().int().min(0).max(0o777).optional(),
          })
          .strict(),
      )
      .max(100)
      .default([]),
    run: z
      .object({ args: z.array(z.string().max(4096)).max(256).default([]), env: z.record(z.string().max(4096)).default({}) })
      .strict()
      .default({}),
    probe: probeTemplateSchema.optional(),
    crash_loop: crashLoopSpec.optional(),
    health_policy: healthPolicySchema.optional(),
    /** The rpc-gateway's method policy (src/config/rpc-policy.ts); absent: every method passes. */
    rpc: rpcPolicySchema.optional(),
    inputs: z.array(inputSpecSchema).max(50).default([]),
    /** Legacy: names of keys the service generates; converted to generated secret inputs. */
    keys: z.array(z.string()).max(50).optional(),
  })
  .strict()
  .superRefine((profile, ctx) => {
    const problem = (at: (string | number)[], message: string) => ctx.addIssue({ code: z.ZodIssueCode.custom, path: at, message })
    const nodeTypes = Object.keys(profile.node_types)
    if (nodeTypes.length === 0) problem(['node_types'], 'must declare at least one node type')
    if (Object.keys(profile.durations).length === 0) problem(['durations'], `must offer at least one of ${DURATIONS.join(', ')}`)
    for (const [duration, placement] of Object.entries(profile.durations)) {
      for (const nodeType of Object.keys(placement.instance_types ?? {})) {
        if (!nodeTypes.includes(nodeType)) problem(['durations', duration, 'instance_types', nodeType], 'is not a declared node type')
      }
    }
    const versions = profile.releases.map((r) => r.version)
    versions.forEach((version, i) => {
      if (versions.indexOf(version) !== i) problem(['releases', i, 'version'], `${version} is listed twice`)
    })
    if (!versions.includes(profile.default_version)) problem(['default_version'], `${profile.default_version} is not one of the releases (${versions.join(', ')})`)
    const builtins: readonly string[] = BUILTIN_VARIABLES
    const checkVars = (vars: Record<string, string>, at: string[]) => {
      for (const name of Object.keys(vars)) {
        if (builtins.includes(name)) problem([...at, name], `${name} is a built-in variable and cannot be redefined`)
      }
    }
    const names = profile.inputs.map((i) => i.name)
    names.forEach((name, i) => {
      if (names.indexOf(name) !== i) problem(['inputs', i, 'name'], `${name} is declared twice`)
    })
    checkVars(profile.vars, ['vars'])
    for (const [name, type] of Object.entries(profile.node_types)) checkVars(type.vars, ['node_types', name, 'vars'])
    for (const nodeType of Object.keys(profile.rpc?.node_types ?? {})) {
      if (!nodeTypes.includes(nodeType)) problem(['rpc', 'node_types', nodeType], 'is not a declared node type')
    }
  })

type ChainProfileFile = Omit<z.infer<typeof chainProfileSchema>, 'keys' | 'inputs'> & { inputs: ProfileInput[] }

/** An input spec as a profile declares it (the spec's fields plus `path` for chain-generated secrets). */
export type ProfileInput = InputSpec & { path?: string; export?: Omit<KeyExport, 'path'> }

export interface ChainRelease {
  version: string
  /** Absolute: `file://` for artifacts shipped beside the profile. */
  url: string
  sha256: string
  /** The `package` that should install the artifact, if any. */
  package?: string
  /** base64 Ed25519 release signature, if signed. */
  signature?: string
  /** Why the release cannot be installed on this machine (its package is missing or another build); absent: available. */
  unavailable?: string
}

export type ChainProfile = Omit<ChainProfileFile, 'releases'> & {
  releases: ChainRelease[]
  /** The profile file, absolute. */
  file: string
}

export interface ChainCatalogue {
  configDir: string
  /** The pinned tag, or for `latest` a hash of every profile file (`sha256:` + 16 hex), so a change is visible. */
  version: string
  profiles: ReadonlyMap<string, ChainProfile>
}

/** `CHAIN_PROFILE_VERSION` naming the config dir's own `chains/`, the catalogue that may change. */
export const LATEST_CATALOGUE = 'latest'
/** Where pinned catalogue versions live in the config dir: `chain-catalogue/<tag>/<id>/profile.yaml`. */
export const PINNED_CATALOGUES_DIR = 'chain-catalogue'
const CATALOGUE_TAG = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

export interface Placement {
  provider: string
  region: string
  instance_type: string
}

export interface NodeConfigInput {
  rpc_port: number
  /**
   * The address the chain binds its RPC to on its host: loopback on a `local` host, the host's
   * private address on a fleet host (docs/infrastructure.md, "Where a fleet node listens").
   * Default `127.0.0.1`.
   */
  rpc_host?: string
  node_id: string
  /** Default: the profile's default_version. */
  version?: string
}

export type NodeConfiguration = CommandPayload<'configure'>

/** Where a chain's RPC listens unless the host says otherwise: loopback (a `local` host). */
export const DEFAULT_RPC_HOST = '127.0.0.1'

/**
 * Where a chain's RPC may listen: loopback or a private IPv4 address (RFC 1918). Never a wildcard
 * (0.0.0.0): not every interface; never a public address: the node's RPC has no authentication
 * of its own, the rpc-gateway is the authenticated entry. IPv6 is not accepted yet: the probes'
 * and configurations' `http://{{rpc_host}}:{{rpc_port}}` would need brackets.
 */
export function isBindableRpcHost(address: string): boolean {
  if (net.isIP(address) !== 4) return false
  const [a, b] = address.split('.').map(Number) as [number, number]
  return a === 127 || a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)
}

/** The package root: it holds `chains/` (and `upgrades/`), so it is the config dir for local use. */
export function defaultConfigDir(): string {
  return packageRoot()
}

/** The folder holding `<id>/profile.yaml` for `version` (`latest` or a pinned tag); ConfigError for an unknown tag. */
export async function catalogueFolder(configDir: string, version: string = LATEST_CATALOGUE): Promise<string> {
  const root = path.resolve(configDir)
  if (version === LATEST_CATALOGUE) return path.join(root, 'chains')
  const pinned = path.join(root, PINNED_CATALOGUES_DIR)
  const folder = path.join(pinned, version)
  if (CATALOGUE_TAG.test(version) && (await isDirectory(folder))) return folder
  const tags = await subfolders(pinned).catch(() => [])
  throw new ConfigError([
    `CHAIN_PROFILE_VERSION=${JSON.stringify(version)}: no such chain catalogue version (no folder ${folder}); ` +
      `use latest (${path.join(root, 'chains')})${tags.length > 0 ? ` or one of: ${tags.join(', ')}` : `, or add ${PINNED_CATALOGUES_DIR}/<tag>/<id>/profile.yaml to the config dir`}`,
  ])
}

/** The profile files of a catalogue folder, sorted by chain folder (absent folder: ConfigError). */
async function profileFiles(chainsDir: string): Promise<{ folder: string; file: string }[]> {
  let entries: string[]
  try {
    entries = await subfolders(chainsDir)
  } catch (err) {
    throw new ConfigError([`cannot read the chain catalogue ${chainsDir}: ${(err as Error).message}`])
  }
  const files: { folder: string; file: string }[] = []
  for (const folder of entries) {
    const file = path.join(chainsDir, folder, 'profile.yaml')
    if (await isFile(file)) files.push({ folder, file })
  }
  return files
}

/** Folder names and profile texts are hashed in order, so any edit, addition or removal changes it. */
function contentVersion(texts: { folder: string; text: string }[]): string {
  const hash = createHash('sha256')
  for (const { folder, text } of texts) hash.update(`${folder}\0${text}\0`)
  return `sha256:${hash.digest('hex').slice(0, 16)}`
}

/** The content version `latest` would have if loaded now, read cheaply (no validation, no artifacts). */
export async function latestCatalogueVersion(configDir: string): Promise<string> {
  const files = await profileFiles(await catalogueFolder(configDir))
  return contentVersion(await Promise.all(files.map(async ({ folder, file }) => ({ folder, text: await fs.readFile(file, 'utf8') }))))
}

/**
 * Reads and validates `<id>/profile.yaml` of every chain of one catalogue version (default
 * `latest`: `<configDir>/chains/`); throws ConfigError listing every problem.
 */
export async function loadChainCatalogue(configDir: string, version: string = LATEST_CATALOGUE): Promise<ChainCatalogue> {
  const root = path.resolve(configDir)
  const chainsDir = await catalogueFolder(root, version)
  const profiles = new Map<string, ChainProfile>()
  const problems: string[] = []
  const texts: { folder: string; text: string }[] = []
  for (const { folder, file } of await profileFiles(chainsDir)) {
    const shown = path.relative(root, file)
    const text = await fs.readFile(file, 'utf8')
    texts.push({ folder, text })
    const result = await loadProfile(file, folder, text)
    if ('problems' in result) problems.push(...result.problems.map((p) => `${shown}: ${p}`))
    else profiles.set(result.profile.id, result.profile)
  }
  if (problems.length > 0) throw new ConfigError(problems)
  if (profiles.size === 0) throw new ConfigError([`no chain profiles in ${chainsDir} (expected <id>/profile.yaml there)`])
  return { configDir: root, version: version === LATEST_CATALOGUE ? contentVersion(texts) : version, profiles }
}

async function loadProfile(file: string, folder: string, text: string): Promise<{ profile: ChainProfile } | { problems: string[] }> {
  const doc = parseDocument(text)
  if (doc.errors.length > 0) return { problems: doc.errors.map((e) => e.message.split('\n')[0] ?? e.message) }
  const parsed = chainProfileSchema.safeParse(doc.toJS())
  if (!parsed.success) return { problems: parsed.error.issues.map((issue) => `${fieldPath(issue.path)}: ${issue.message}`) }
  const data = parsed.data
  const problems: string[] = []
  if (data.id !== folder) problems.push(`id: "${data.id}" must match its folder name "${folder}"`)

  const releases: ChainRelease[] = []
  for (const [i, release] of data.releases.entries()) {
    const resolved = await resolveArtifact(path.dirname(file), release)
    if ('problem' in resolved) problems.push(`releases[${i}].${resolved.problem}`)
    else
      releases.push({
        version: release.version,
        url: resolved.url,
        sha256: release.sha256,
        ...(release.package ? { package: release.package } : {}),
        ...(release.signature ? { signature: release.signature } : {}),
        ...(resolved.unavailable ? { unavailable: resolved.unavailable } : {}),
      })
  }
  if (problems.length > 0) return { problems }

  let inputs: ProfileInput[]
  try {
    const declared: ProfileInput[] = data.inputs.map((i) => ({ ...i, ...(i.source ? { source: i.source } : {}) }))
    inputs = legacyKeysToInputSpecs(data.id, data.keys ?? [], declared)
  } catch (err) {
    return { problems: err instanceof ConfigError ? err.problems.map((p) => `keys: ${p}`) : [(err as Error).message] }
  }
  const { keys: _legacy, ...rest } = data
  const profile: ChainProfile = { ...rest, inputs, releases, file }
  for (const nodeType of Object.keys(data.node_types)) {
    try {
      renderNodeConfig(profile, nodeType, { rpc_port: 8545, node_id: '00000000-0000-4000-8000-000000000000' }, { evenUnavailable: true })
    } catch (err) {
      problems.push(`node type ${nodeType}: ${err instanceof ConfigError ? err.problems.join('; ') : (err as Error).message}`)
    }
  }
  return problems.length > 0 ? { problems } : { profile }
}

async function resolveArtifact(profileDir: string, release: z.infer<typeof releaseSchema>): Promise<{ url: string; unavailable?: string } | { problem: string }> {
  let local: string
  if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(release.artifact)) {
    let url: URL
    try {
      url = new URL(release.artifact)
    } catch {
      return { problem: `artifact: "${release.artifact}" is not a URL` }
    }
    if (url.protocol === 'http:' || url.protocol === 'https:') return { url: url.href }
    if (url.protocol !== 'file:') return { problem: 'artifact: must be a path, a file:// URL or an http(s):// URL' }
    local = fileURLToPath(url)
  } else {
    local = path.resolve(profileDir, release.artifact)
  }
  if (release.package && !path.isAbsolute(release.artifact) && !release.artifact.startsWith('file:')) {
    return { problem: 'package: only an artifact outside the catalogue (an absolute file:// URL) is installed by a package' }
  }
  let actual: string
  try {
    actual = await sha256OfFile(local)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (release.npm_package && code === 'ENOENT') {
      return { url: pathToFileURL(local).href, unavailable: `${local} is not installed (npm dependency ${release.npm_package}, optional and for linux x64 only: npm install on such a host)` }
    }
    if (release.package && code === 'ENOENT') {
      return { url: pathToFileURL(local).href, unavailable: `${local} is not installed (Debian package ${release.package}: apt-get install ${release.package})` }
    }
    return { problem: `artifact: cannot read ${local}: ${code ?? (err as Error).message}` }
  }
  if (release.package && actual !== release.sha256) {
    return {
      url: pathToFileURL(local).href,
      unavailable: `${local} is not the build this release pins (another version of the Debian package ${release.package} is installed); install the pinned one or add a release for it`,
    }
  }
  if (actual !== release.sha256) {
    return { problem: `sha256: ${release.artifact} does not match the checksum (the file's SHA-256 is ${actual}); a changed artifact needs its new checksum in the profile` }
  }
  return { url: pathToFileURL(local).href }
}

export function findProfile(catalogue: ChainCatalogue, id: string): ChainProfile | undefined {
  return catalogue.profiles.get(id)
}

export function getProfile(catalogue: ChainCatalogue, id: string): ChainProfile {
  const profile = catalogue.profiles.get(id)
  if (!profile) throw new ValidationError(`unknown chain profile "${id}"`, `chain_profile_id must be one of: ${[...catalogue.profiles.keys()].join(', ')}`)
  return profile
}

export function isDuration(value: string): value is SubscriptionDuration {
  return (DURATIONS as readonly string[]).includes(value)
}

/** Spec: provider, region and instance type are resolved from the chain profile and the duration. */
export function resolvePlacement(profile: ChainProfile, nodeType: string, duration: string): Placement {
  const type = nodeTypeOf(profile, nodeType)
  const placement = isDuration(duration) ? profile.durations[duration] : undefined
  if (!placement) {
    const offered = DURATIONS.filter((d) => profile.durations[d] !== undefined)
    throw new ValidationError(`chain ${profile.id} is not offered for duration "${duration}"`, `duration must be one of: ${offered.join(', ')}`)
  }
  return {
    provider: placement.provider,
    region: placement.region,
    instance_type: placement.instance_types?.[nodeType] ?? placement.instance_type ?? type.instance_type,
  }
}

export function releaseFor(profile: ChainProfile, version: string): ChainRelease {
  const release = profile.releases.find((r) => r.version === version)
  if (!release) {
    throw new ValidationError(`chain ${profile.id} has no release ${version}`, `version must be one of: ${profile.releases.map((r) => r.version).join(', ')}`)
  }
  return release
}

/** The `configure` command for one node: the profile's templates rendered with this node's values. */
export function renderNodeConfig(profile: ChainProfile, nodeType: string, input: NodeConfigInput, options: { evenUnavailable?: boolean } = {}): NodeConfiguration {
  const type = nodeTypeOf(profile, nodeType)
  if (!Number.isInteger(input.rpc_port) || input.rpc_port < 1 || input.rpc_port > 65_535) {
    throw new ValidationError(`rpc_port ${input.rpc_port} is not a port number`)
  }
  if (input.node_id.length === 0) throw new ValidationError('node_id must not be empty')
  const rpcHost = input.rpc_host ?? DEFAULT_RPC_HOST
  // Rendered into command lines and config files: an IP address literal only, never a wildcard.
  if (!isBindableRpcHost(rpcHost)) throw new ValidationError(`rpc_host ${rpcHost.slice(0, 80)} is not a loopback or private IPv4 address a chain may bind to`)
  const release = releaseFor(profile, input.version ?? profile.default_version)
  if (release.unavailable && !options.evenUnavailable && !installedSince(release)) {
    throw new ValidationError(`chain ${profile.id} release ${release.version} cannot be installed: ${release.unavailable}`, release.unavailable)
  }
  const vars: Record<string, string> = {
    ...profile.vars,
    ...type.vars,
    rpc_port: String(input.rpc_port),
    rpc_host: rpcHost,
    node_id: input.node_id,
    node_type: nodeType,
    version: release.version,
    chain_profile_id: profile.id,
  }
  const render = (text: string, where: string) => renderTemplate(text, vars, where)
  const probe = profile.probe
  const payload = {
    binary_name: profile.binary_name,
    artifact: { version: release.version, url: release.url, sha256: release.sha256, ...(release.signature ? { signature: release.signature } : {}) },
    files: profile.config_files.map((f, i) => ({ path: f.path, content: render(f.template, `config_files[${i}].template`), ...(f.mode === undefined ? {} : { mode: f.mode }) })),
    run: {
      runtime: profile.runtime,
      args: profile.run.args.map((a, i) => render(a, `run.args[${i}]`)),
      env: Object.fromEntries(Object.entries(profile.run.env).map(([k, v]) => [k, render(v, `run.env.${k}`)])),
    },
    probe: probe === undefined ? undefined : renderProbe(probe, render),
    crash_loop: profile.crash_loop,
    rpc_port: input.rpc_port,
  }
  const parsed = commandPayloads.configure.safeParse(payload)
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => `renders an invalid configure command: ${fieldPath(issue.path)}: ${issue.message}`))
  }
  return parsed.data
}

function renderProbe(probe: NonNullable<ChainProfile['probe']>, render: (text: string, where: string) => string): unknown {
  const timing = { timeout_ms: probe.timeout_ms, startup_grace_ms: probe.startup_grace_ms }
  switch (probe.type) {
    case 'ethereum_jsonrpc':
      return { type: probe.type, url: render(probe.url, 'probe.url'), ...timing }
    case 'command':
      return { type: probe.type, command: probe.command.map((c, i) => render(c, `probe.command[${i}]`)), ...timing }
    case 'bitcoin_rpc':
      return { type: probe.type, url: render(probe.url, 'probe.url'), cookie_file: probe.cookie_file, sync_policy: probe.sync_policy, ...timing }
  }
}

/** Replaces `{{name}}`; an unknown name is an error, so a typo never reaches a node's config. */
export function renderTemplate(text: string, vars: Readonly<Record<string, string>>, where = 'template'): string {
  return text.replace(VARIABLE, (_, name: string) => {
    const value = Object.hasOwn(vars, name) ? vars[name] : undefined
    if (value === undefined) throw new ConfigError([`${where}: unknown variable {{${name}}} (known: ${Object.keys(vars).sort().join(', ')})`])
    return value
  })
}

function nodeTypeOf(profile: ChainProfile, nodeType: string): ChainProfile['node_types'][string] {
  const type = Object.hasOwn(profile.node_types, nodeType) ? profile.node_types[nodeType] : undefined
  if (!type) {
    throw new ValidationError(`chain ${profile.id} has no node type "${nodeType}"`, `node_type must be one of: ${Object.keys(profile.node_types).join(', ')}`)
  }
  return type
}

function fieldPath(at: (string | number)[]): string {
  if (at.length === 0) return '(top level)'
  return at.map((part, i) => (typeof part === 'number' ? `[${part}]` : i === 0 ? part : `.${part}`)).join('')
}

async function subfolders(dir: string): Promise<string[]> {
  return (await fs.readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name).sort()
}

async function isDirectory(dir: string): Promise<boolean> {
  try {
    return (await fs.stat(dir)).isDirectory()
  } catch {
    return false
  }
}

async function isFile(file: string): Promise<boolean> {
  try {
    return (await fs.stat(file)).isFile()
  } catch {
    return false
  }
}

/** A package installed after the catalogue was loaded counts: an operator need not restart after `apt-get install`. */
function installedSince(release: ChainRelease): boolean {
  try {
    return sha256OfFileSync(fileURLToPath(release.url)) === release.sha256
  } catch {
    return false
  }
}

