/**
 * Upgrade manifests: `{config_dir}/upgrades/<chain_profile_id>/<upgrade_id>.yaml`, one per
 * upgrade of a chain (format in docs/rollouts.md, example in upgrades/devnet/). A manifest fills
 * an auto-mode rollout (spec: "POST /api/v1/rollouts request"): binary_name, target version,
 * artifact URL and checksum, migration_type, recovery_plan, config_changes and state
 * compatibility, and `manifest_content_hash` over the file's raw bytes.
 *
 * Loading validates everything a rollout could later trip over: unknown fields, a local
 * artifact whose bytes do not match the checksum, config templates that do not render for every
 * node type of the chain. A problem is a ValidationError listing each one, so POST answers 400
 * naming the file and the field.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { configFile, relativePath, runSpec, type ConfigFile, type RunSpec } from '../agent-gateway/protocol.js'
import { DEFAULT_RPC_HOST, renderTemplate, type ChainProfile } from '../config/chains.js'
import { sha256OfFile } from '../config/file-digest.js'
import { ConfigError, ValidationError } from '../errors.js'

export const UPGRADES_DIR = 'upgrades'

/**
 * `breaking`: the new version changes chain state or protocol in a way the old one cannot
 * follow; a canary batch then waits for `approve_canary` (spec, Rollout execution rules).
 * `non_breaking`: anything else.
 */
export const MIGRATION_TYPES = ['non_breaking', 'breaking'] as const
export type MigrationType = (typeof MIGRATION_TYPES)[number]

/** Chain profile ids and upgrade ids become path segments: nothing that could leave the folder. */
export const MANIFEST_ID = /^[a-z0-9][a-z0-9._-]*$/
const MAX_ID_LENGTH = 200

export const VERSION_TEXT = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/
export const versionString = z
  .string({ invalid_type_error: 'must be a string (quote versions in YAML, e.g. "1.10")' })
  .min(1)
  .max(64)
  .regex(VERSION_TEXT, 'must be letters, digits, ".", "_", "+" or "-"')

export const CHECKSUM = /^sha256:[0-9a-f]{64}$/
export const checksumString = z.string().regex(CHECKSUM, 'must be sha256:<64 lowercase hex digits>')

export const binaryName = z.string().min(1).max(100).regex(/^[A-Za-z0-9._-]+$/, 'must be letters, digits, ".", "_" or "-"')

const configChangesSchema = z
  .object({
    /** Recorded as the node's config_version after the upgrade. */
    config_version: z.string().min(1).max(64).optional(),
    /** Templates with the chain profile's variables, rendered per node; they replace config/ as a whole. */
    files: z
      .array(
        z
          .object({
            path: relativePath.refine((p) => p.startsWith('config/'), 'must be inside config/ (e.g. config/node.json)'),
            template: z.string().max(1_000_000),
            mode: z.number().int().min(0).max(0o777).optional(),
          })
          .strict(),
      )
      .max(100)
      .optional(),
    /** Replaces how the chain process is started (arguments, environment), when the new version needs it. */
    run: z
      .object({ args: z.array(z.string().max(4096)).max(256).optional(), env: z.record(z.string().max(4096)).optional() })
      .strict()
      .optional(),
  })
  .strict()
  .refine((c) => c.config_version !== undefined || c.files !== undefined || c.run !== undefined, 'must change something: config_version, files or run')

export type ConfigChanges = z.infer<typeof configChangesSchema>

export const manifestFileSchema = z
  .object({
    description: z.string().min(1).max(2000).optional(),
    binary_name: binaryName,
    target_version: versionString,
    /**
     * A path relative to the manifest's folder, or a file:// or http(s):// URL; a rollout or group
     * then uses it only if it is a release of the chain profile or under ARTIFACT_ALLOWED_SOURCES
     * (create.ts, which knows the setting). Absent: the artifact store's binary_name
     * target_version with this checksum (docs/artifacts.md).
     */
    artifact: z.string().min(1).max(2048).optional(),
    checksum: checksumString,
    migration_type: z.enum(MIGRATION_TYPES),
    recovery_plan: z.string().trim().min(1, 'must say what an operator does when the upgrade cannot be undone automatically').max(10_000),
    config_changes: configChangesSchema.optional(),
    state_compatibility: z
      .object({
        /** The versions a node may run to be upgraded by this manifest in place. */
        compatible_source_versions: z.array(versionString).min(1).max(100),
      })
      .strict(),
  })
  .strict()

/** The manifest fields a rollout keeps beyond its own columns (the `manifest` json column). */
export interface RolloutManifestData {
  description: string | null
  recovery_plan: string
  config_changes: ConfigChanges | null
  state_compatibility: { compatible_source_versions: string[] }
}

export interface UpgradeManifest {
  chain_profile_id: string
  upgrade_id: string
  /** The manifest file, absolute. */
  file: string
  binary_name: string
  target_version: string
  /** Absolute: `file://` for an artifact shipped beside the manifest. Null: from the artifact store. */
  target_binary_url: string | null
  /** `sha256:<hex>` */
  target_binary_checksum: string
  migration_type: MigrationType
  data: RolloutManifestData
  /** `sha256:<hex>` of the file's raw bytes. */
  manifest_content_hash: string
}

export function isManifestId(value: string): boolean {
  return value.length <= MAX_ID_LENGTH && MANIFEST_ID.test(value)
}

/** The manifest's path; a ValidationError for an id that is not a plain name. */
export function manifestPath(configDir: string, chainProfileId: string, upgradeId: string): string {
  const problems: string[] = []
  if (!isManifestId(chainProfileId)) problems.push(`chain_profile_id: "${chainProfileId}" must match ${MANIFEST_ID.source} (at most ${MAX_ID_LENGTH})`)
  if (!isManifestId(upgradeId)) problems.push(`upgrade_id: "${upgradeId}" must match ${MANIFEST_ID.source} (at most ${MAX_ID_LENGTH})`)
  if (problems.length > 0) throw new ValidationError('invalid upgrade id', problems.join('; '))
  const root = path.resolve(configDir, UPGRADES_DIR)
  const file = path.resolve(root, chainProfileId, `${upgradeId}.yaml`)
  // The pattern already rules out separators and "..": this is the belt to those braces.
  if (path.relative(root, file).startsWith('..')) throw new ValidationError('invalid upgrade id', `upgrade_id: "${upgradeId}" leaves ${root}`)
  return file
}

export function sha256Bytes(bytes: Uint8Array): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`
}

/**
 * Reads and validates one manifest. `profile` (the chain's catalogue entry) lets the config
 * templates be rendered once per node type, so a template error stops creation, not an upgrade.
 * Throws ValidationError: no such file, or a list of every problem in it.
 */
export async function loadUpgradeManifest(configDir: string, chainProfileId: string, upgradeId: string, profile?: ChainProfile): Promise<UpgradeManifest> {
  const file = manifestPath(configDir, chainProfileId, upgradeId)
  const shown = path.join(UPGRADES_DIR, chainProfileId, `${upgradeId}.yaml`)
  let bytes: Buffer
  try {
    bytes = await fs.readFile(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new ValidationError(`no upgrade manifest ${shown}`, `upgrade_id: no file ${file}; available for ${chainProfileId}: ${(await listUpgradeIds(configDir, chainProfileId)).join(', ') || 'none'}`)
    }
    throw new ValidationError(`cannot read upgrade manifest ${shown}`, `${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  const invalid = (problems: string[]) => new ValidationError(`invalid upgrade manifest ${shown}`, problems.map((p) => `${shown}: ${p}`).join('; '))

  const doc = parseDocument(bytes.toString('utf8'))
  if (doc.errors.length > 0) throw invalid(doc.errors.map((e) => e.message.split('\n')[0] ?? e.message))
  const parsed = manifestFileSchema.safeParse(doc.toJS())
  if (!parsed.success) throw invalid(parsed.error.issues.map((issue) => `${fieldPath(issue.path)}: ${issue.message}`))
  const data = parsed.data

  const problems: string[] = []
  const artifact = data.artifact === undefined ? { url: null } : await resolveArtifact(path.dirname(file), data.artifact, data.checksum)
  if ('problem' in artifact) problems.push(artifact.problem)
  if (data.state_compatibility.compatible_source_versions.includes(data.target_version)) {
    problems.push(`state_compatibility.compatible_source_versions: lists the target version ${data.target_version}`)
  }
  if (profile) problems.push(...checkAgainstProfile(profile, data))
  if (problems.length > 0 || 'problem' in artifact) throw invalid(problems)

  return {
    chain_profile_id: chainProfileId,
    upgrade_id: upgradeId,
    file,
    binary_name: data.binary_name,
    target_version: data.target_version,
    target_binary_url: artifact.url,
    target_binary_checksum: data.checksum,
    migration_type: data.migration_type,
    data: {
      description: data.description ?? null,
      recovery_plan: data.recovery_plan,
      config_changes: data.config_changes ?? null,
      state_compatibility: { compatible_source_versions: data.state_compatibility.compatible_source_versions },
    },
    manifest_content_hash: sha256Bytes(bytes),
  }
}

/** The upgrade ids that have a manifest for a chain, sorted; none when the folder is absent. */
export async function listUpgradeIds(configDir: string, chainProfileId: string): Promise<string[]> {
  if (!isManifestId(chainProfileId)) return []
  let entries: string[]
  try {
    entries = await fs.readdir(path.resolve(configDir, UPGRADES_DIR, chainProfileId))
  } catch {
    return []
  }
  return entries
    .filter((name) => name.endsWith('.yaml'))
    .map((name) => name.slice(0, -'.yaml'.length))
    .filter(isManifestId)
    .sort()
}

/** The variables a node's config templates see: the same as at provisioning (src/config/chains.ts). */
export interface NodeTemplateInput {
  rpc_port: number
  /** Default 127.0.0.1 (NodeConfigInput.rpc_host). */
  rpc_host?: string
  node_id: string
}

/**
 * A manifest's config_changes rendered for one node: the upgrade command's `config_files`,
 * `config_version` and `run` (src/agent-gateway/protocol.ts, commandPayloads.upgrade). `version` in
 * the templates is the target version. Without config changes, nothing to add.
 */
export function renderConfigChanges(
  profile: ChainProfile,
  nodeType: string,
  targetVersion: string,
  changes: ConfigChanges | null,
  node: NodeTemplateInput,
): { config_files?: ConfigFile[]; config_version?: string; run?: RunSpec } {
  if (!changes) return {}
  const type = Object.hasOwn(profile.node_types, nodeType) ? profile.node_types[nodeType] : undefined
  if (!type) throw new ValidationError(`chain ${profile.id} has no node type "${nodeType}"`)
  const vars: Record<string, string> = {
    ...profile.vars,
    ...type.vars,
    rpc_port: String(node.rpc_port),
    rpc_host: node.rpc_host ?? DEFAULT_RPC_HOST,
    node_id: node.node_id,
    node_type: nodeType,
    version: targetVersion,
    chain_profile_id: profile.id,
  }
  const out: { config_files?: ConfigFile[]; config_version?: string; run?: RunSpec } = {}
  if (changes.files) {
    out.config_files = changes.files.map((f, i) =>
      configFile.parse({ path: f.path, content: renderTemplate(f.template, vars, `config_changes.files[${i}].template`), ...(f.mode === undefined ? {} : { mode: f.mode }) }),
    )
  }
  if (changes.config_version !== undefined) out.config_version = changes.config_version
  if (changes.run) {
    out.run = runSpec.parse({
      runtime: profile.runtime,
      args: (changes.run.args ?? profile.run.args).map((a, i) => renderTemplate(a, vars, `config_changes.run.args[${i}]`)),
      env: Object.fromEntries(Object.entries(changes.run.env ?? profile.run.env).map(([k, v]) => [k, renderTemplate(v, vars, `config_changes.run.env.${k}`)])),
    })
  }
  return out
}

/**
 * A node's agent supervises one chain process, the profile's binary_name; a release of another
 * binary would be installed in its place (docs/rollouts.md, "One binary per node").
 */
export function oneBinaryProblem(field: string, profile: Pick<ChainProfile, 'id' | 'binary_name'>, binaryName: string): string {
  return `${field}: ${profile.id}'s nodes run one binary, ${profile.binary_name}; ${binaryName} is not it (a node agent supervises a single chain binary)`
}

function checkAgainstProfile(profile: ChainProfile, data: z.infer<typeof manifestFileSchema>): string[] {
  const problems: string[] = []
  if (data.binary_name !== profile.binary_name) problems.push(oneBinaryProblem('binary_name', profile, data.binary_name))
  // Two artifacts claiming the same version of the chain's own binary would make binary_version ambiguous.
  const release = data.binary_name === profile.binary_name ? profile.releases.find((r) => r.version === data.target_version) : undefined
  if (release && `sha256:${release.sha256}` !== data.checksum) {
    problems.push(`checksum: ${profile.id} release ${release.version} has sha256:${release.sha256}; a manifest for that version must use the same artifact`)
  }
  for (const nodeType of Object.keys(profile.node_types)) {
    try {
      renderConfigChanges(profile, nodeType, data.target_version, data.config_changes ?? null, { rpc_port: 8545, node_id: '00000000-0000-4000-8000-000000000000' })
    } catch (err) {
      const detail = err instanceof ConfigError ? err.problems.join('; ') : err instanceof z.ZodError ? err.issues.map((i) => `${fieldPath(i.path)}: ${i.message}`).join('; ') : (err as Error).message
      problems.push(`config_changes (node type ${nodeType}): ${detail}`)
    }
  }
  return problems
}

async function resolveArtifact(manifestDir: string, artifact: string, checksum: string): Promise<{ url: string } | { problem: string }> {
  let local: string
  if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(artifact)) {
    let url: URL
    try {
      url = new URL(artifact)
    } catch {
      return { problem: `artifact: "${artifact}" is not a URL` }
    }
    if (url.protocol === 'http:' || url.protocol === 'https:') return { url: url.href }
    if (url.protocol !== 'file:') return { problem: 'artifact: must be a path, a file:// URL or an http(s):// URL' }
    local = fileURLToPath(url)
  } else {
    local = path.resolve(manifestDir, artifact)
  }
  let actual: string
  try {
    actual = `sha256:${await sha256OfFile(local)}`
  } catch (err) {
    return { problem: `artifact: cannot read ${local}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }
  }
  // The file's own digest is not echoed: a 400 must not tell what any file on this host hashes to.
  if (actual !== checksum) return { problem: `checksum: ${artifact} does not match the artifact (checksum mismatch)` }
  return { url: pathToFileURL(local).href }
}


function fieldPath(at: readonly (string | number)[]): string {
  if (at.length === 0) return '(top level)'
  return at.map((part, i) => (typeof part === 'number' ? `[${part}]` : i === 0 ? part : `.${part}`)).join('')
}
