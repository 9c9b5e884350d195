/**
 * Creating rollouts and rollout groups (spec: "POST /api/v1/rollouts request", "POST
 * /api/v1/rollout-groups request"; docs/rollouts.md, "Creating a rollout"). Everything a rollout
 * or group could later fail on for want of configuration (an unknown chain or node type, a
 * missing or broken manifest, a version without a release) is checked here, so creation answers
 * 400 instead of a workflow failing hours later. Neither starts anything: a rollout is
 * `pending` until POST …/start, a group's component rollouts are created by the group workflow.
 */
import { ROLLOUT_STRATEGIES, FAILURE_POLICIES, type RolloutStrategy } from './states.js'
import { findProfile, type ChainCatalogue, type ChainProfile } from '../config/chains.js'
import { parseDuration } from '../config/duration.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError, ValidationError } from '../errors.js'
import { describeIssues } from '../http/validation.js'
import { z } from '../http/zod.js'
import { resolveStoredArtifact, type ArtifactSource } from '../artifacts/resolve.js'
import { artifactSourceProblem, type AllowedSources } from '../artifacts/sources.js'
import { artifactOf } from './node-upgrade.js'
import { binaryName, loadUpgradeManifest, MANIFEST_ID, oneBinaryProblem, MIGRATION_TYPES, versionString, type MigrationType, type UpgradeManifest } from './manifests.js'
import {
  findActiveGroup,
  findActiveRollout,
  insertRollout,
  insertRolloutGroup,
  type GroupComponent,
  type NewRollout,
  type RolloutGroupRecord,
  type RolloutRecord,
} from './store.js'

/** Defaults when the request leaves a field out (docs/rollouts.md, "Defaults"). */
/** A schedule further ahead would hold the chain's one active rollout slot for longer than any plan needs. */
export const MAX_SCHEDULE_AHEAD_DAYS = 30
const MAX_SCHEDULE_AHEAD_MS = MAX_SCHEDULE_AHEAD_DAYS * 86_400_000

export const ROLLOUT_DEFAULTS = {
  strategy: 'rolling' as RolloutStrategy,
  batch_size: 10,
  /** Auto-pause once more than a fifth of the attempted nodes failed. */
  failure_threshold: 0.2,
  health_wait_duration: '5m',
  /** Only for the canary strategy. */
  canary_size: 1,
} as const

export const MIN_HEALTH_WAIT_MS = 1_000
export const MAX_HEALTH_WAIT_MS = 86_400_000
export const MAX_BATCH_SIZE = 10_000
export const MAX_COMPONENTS = 20

const positiveInt = (what: string) => z.number({ invalid_type_error: `must be a whole number (${what})` }).int('must be a whole number').min(1, 'must be at least 1').max(MAX_BATCH_SIZE, `must be at most ${MAX_BATCH_SIZE}`)

const durationText = z
  .string()
  .min(1)
  .max(32)
  .refine((text) => parseDuration(text) !== null, 'must be a duration such as 30s, 5m or 1h30m')
  .refine((text) => {
    const ms = parseDuration(text)
    return ms === null || (ms >= MIN_HEALTH_WAIT_MS && ms <= MAX_HEALTH_WAIT_MS)
  }, 'must be between 1s and 24h')
  .openapi({ example: '5m' })

const idText = (what: string, max: number) => z.string().min(1).max(max).regex(MANIFEST_ID, `must be a ${what}: lowercase letters, digits, ".", "_" or "-", starting with a letter or digit`)

/** `sha256:<hex>`; hex digits in either case, stored lowercase. */
const requestChecksum = z
  .string()
  .regex(/^sha256:[0-9a-fA-F]{64}$/, 'must be sha256:<64 hex digits>')
  .transform((text) => text.toLowerCase())
  .openapi({ example: 'sha256:9479d9205664a5fb6fd2e997c9f2ed3f88aabbddd3837bb1b774bacd5f8ea7ae' })

const artifactUrl = z
  .string()
  .max(2048)
  .url('must be an absolute URL')
  .refine((text) => /^(https?|file):/i.test(text), 'must be an http://, https:// or file:// URL')

const chainProfileId = z.string().min(1).max(100).openapi({ example: 'devnet' })
const nodeType = z.string().min(1).max(50).openapi({ example: 'full' })

const tuning = {
  strategy: z.enum(ROLLOUT_STRATEGIES).optional().openapi({ description: `Default ${ROLLOUT_DEFAULTS.strategy}` }),
  batch_size: positiveInt('nodes per batch').optional().openapi({ description: `Nodes upgraded in parallel per batch; default ${ROLLOUT_DEFAULTS.batch_size}. Ignored by all_at_once (one batch)` }),
  canary_size: positiveInt('canary nodes').optional().openapi({ description: `canary strategy only: nodes in the canary batch; default ${ROLLOUT_DEFAULTS.canary_size}` }),
  failure_threshold: z.number().min(0, 'must be between 0.0 and 1.0').max(1, 'must be between 0.0 and 1.0').optional().openapi({ description: `Auto-pause when failed/attempted exceeds it; default ${ROLLOUT_DEFAULTS.failure_threshold}` }),
  health_wait_duration: durationText.optional().openapi({ description: `How long an upgraded node must stay healthy; default ${ROLLOUT_DEFAULTS.health_wait_duration}` }),
  reason: z.string().min(1).max(2000).optional().openapi({ description: 'Why: shown with the rollout' }),
}

export const createRolloutRequest = z
  .object({
    upgrade_id: idText('upgrade id', 200).optional().openapi({ description: 'Auto mode: upgrades/<chain_profile_id>/<upgrade_id>.yaml fills the binary and target fields', example: 'devnet-1.1.0' }),
    chain_profile_id: chainProfileId,
    node_type: nodeType,
    source_version: versionString.openapi({ description: 'The version the nodes to upgrade run now', example: '1.0.0' }),
    binary_name: binaryName.optional().openapi({ description: 'Manual mode: required. Auto mode: from the manifest (must agree if sent)', example: 'devnet-node' }),
    target_version: versionString.optional().openapi({ example: '1.1.0' }),
    target_binary_url: artifactUrl.optional().openapi({ description: 'Manual mode, optional: an http(s):// or file:// URL of the artifact, accepted only under a source in ARTIFACT_ALLOWED_SOURCES or exactly a release of the chain profile (400 otherwise). Without it, binary_name, target_version and target_binary_checksum name a signed artifact of the artifact store (docs/artifacts.md)' }),
    target_binary_checksum: requestChecksum.optional(),
    migration_type: z.enum(MIGRATION_TYPES).optional().openapi({ description: 'Manual mode: default non_breaking. Auto mode: from the manifest (must agree if sent)' }),
    ...tuning,
    scheduled_at: z.string().datetime({ offset: true, message: 'must be an ISO 8601 date-time' }).optional().openapi({ description: `Start no earlier than this time, in the future and at most ${MAX_SCHEDULE_AHEAD_DAYS} days ahead: POST …/start then makes the rollout scheduled` }),
  })
  .strict()
  .superRefine((body, ctx) => {
    if (body.upgrade_id !== undefined) return
    // Without target_binary_url, binary_name, target_version and the checksum name a stored artifact.
    for (const field of ['binary_name', 'target_version', 'target_binary_checksum'] as const) {
      if (body[field] === undefined) ctx.addIssue({ code: z.ZodIssueCode.custom, path: [field], message: 'is required in manual mode (without upgrade_id)' })
    }
  })
  .openapi('CreateRolloutRequest')

export type CreateRolloutRequest = z.input<typeof createRolloutRequest>

const componentRequest = z
  .object({
    upgrade_id: idText('upgrade id', 200).optional().openapi({ description: "The component's manifest; without it, the chain profile's release of `version`" }),
    binary_name: binaryName,
    node_type: nodeType,
    version: versionString,
  })
  .strict()

export const createGroupRequest = z
  .object({
    chain_profile_id: chainProfileId,
    node_type: nodeType,
    failure_policy: z.enum(FAILURE_POLICIES, { required_error: 'is required: partial_ok, rollback_all or manual (there is no default)' }),
    desired_versions: z.record(binaryName, versionString).optional().openapi({ description: 'binary_name -> version; when given, must name exactly the components and their versions' }),
    component_order: z.array(componentRequest).min(1, 'must list at least one component').max(MAX_COMPONENTS),
    ...tuning,
  })
  .strict()
  .openapi('CreateRolloutGroupRequest')

export type CreateGroupRequest = z.input<typeof createGroupRequest>

export interface CreateOptions {
  /** The authenticated caller's user id (spec: created_by). */
  createdBy: string
  /** The config dir holding upgrades/ (the catalogue's own config dir unless given). */
  configDir?: string
  catalogue: ChainCatalogue
  now: Date
  /**
   * ARTIFACT_ALLOWED_SOURCES: the URL prefixes a rollout's artifact may come from
   * (docs/artifacts.md). None when absent: every artifact URL is refused unless it is a release
   * of the chain profile; stored artifacts need no URL.
   */
  artifactSources?: AllowedSources
  /**
   * The artifact store and the release public keys (docs/artifacts.md): a rollout or manifest
   * without a URL names a stored artifact, which must be there with that digest and signed by one
   * of the keys. Absent: such a rollout is refused.
   */
  artifactStore?: ArtifactSource
}

function parseBody<T extends z.ZodTypeAny>(schema: T, body: unknown): z.output<T> {
  const parsed = schema.safeParse(body)
  if (!parsed.success) throw new ValidationError('invalid request', describeIssues('body', parsed.error.issues).join('; '))
  return parsed.data as z.output<T>
}

function invalid(problems: string[]): ValidationError {
  return new ValidationError('invalid request', problems.join('; '))
}

function profileAndNodeType(catalogue: ChainCatalogue, chainProfileId: string, type: string, problems: string[], at = 'body'): ChainProfile | undefined {
  const profile = findProfile(catalogue, chainProfileId)
  if (!profile) {
    problems.push(`${at}.chain_profile_id: unknown chain profile "${chainProfileId}" (known: ${[...catalogue.profiles.keys()].join(', ')})`)
    return undefined
  }
  checkNodeType(profile, type, problems, `${at}.node_type`)
  return profile
}

/** The artifact's source, for a 400 (src/artifacts/sources.ts): the profile's own releases are trusted. */
function sourceProblem(field: string, url: string, profile: ChainProfile, options: CreateOptions): string | undefined {
  return artifactSourceProblem(field, url, { allowed: options.artifactSources ?? [], trusted: profile.releases.map((r) => r.url) })
}

/**
 * The URL agents fetch the target from: a URL as given (a profile release or under an allowed source), or the
 * artifact store's for binary, version and digest. A problem is pushed with `field`; the URL is
 * then unused (nothing is written).
 */
async function targetUrl(
  db: Queryable,
  field: string,
  url: string | null | undefined,
  ref: { binary_name: string; version: string; checksum: string },
  profile: ChainProfile,
  options: CreateOptions,
  problems: string[],
): Promise<string> {
  if (url !== null && url !== undefined) {
    const problem = sourceProblem(field, url, profile, options)
    if (problem) problems.push(problem)
    return url
  }
  const stored = await resolveStoredArtifact(db, options.artifactStore, { binary_name: ref.binary_name, version: ref.version, sha256: ref.checksum.replace(/^sha256:/, '') })
  if ('problem' in stored) {
    problems.push(`${field}: ${stored.problem}`)
    return ''
  }
  return stored.url
}

function checkNodeType(profile: ChainProfile, type: string, problems: string[], at: string): void {
  if (!Object.hasOwn(profile.node_types, type)) problems.push(`${at}: chain ${profile.id} has no node type "${type}" (known: ${Object.keys(profile.node_types).join(', ')})`)
}

interface Tuning {
  strategy: RolloutStrategy
  batch_size: number
  canary_size: number | null
  failure_threshold: number
  health_wait_duration_ms: number
}

function resolveTuning(body: { strategy?: RolloutStrategy | undefined; batch_size?: number | undefined; canary_size?: number | undefined; failure_threshold?: number | undefined; health_wait_duration?: string | undefined }, problems: string[]): Tuning {
  const strategy = body.strategy ?? ROLLOUT_DEFAULTS.strategy
  if (body.canary_size !== undefined && strategy !== 'canary') problems.push(`body.canary_size: applies to the canary strategy only (strategy is ${strategy})`)
  return {
    strategy,
    batch_size: body.batch_size ?? ROLLOUT_DEFAULTS.batch_size,
    canary_size: strategy === 'canary' ? (body.canary_size ?? ROLLOUT_DEFAULTS.canary_size) : null,
    failure_threshold: body.failure_threshold ?? ROLLOUT_DEFAULTS.failure_threshold,
    health_wait_duration_ms: parseDuration(body.health_wait_duration ?? ROLLOUT_DEFAULTS.health_wait_duration) as number,
  }
}

/** A node that fails its health validation, or a full rollback, takes it back to the source version. */
function noWayBack(profile: ChainProfile, sourceVersion: string): string {
  return `body.source_version: chain ${profile.id} has no release ${sourceVersion} (releases: ${profile.releases.map((r) => r.version).join(', ')}) and no rollout installed it; the nodes must be able to go back to the source version`
}

/**
 * POST /api/v1/rollouts: a `pending` rollout in auto mode (upgrade_id: the manifest fills the
 * binary and target fields; any of them also sent must agree) or manual mode. 400 for any
 * invalid field, 409 while the chain has an active rollout or rollout group.
 */
export async function createRollout(db: Queryable, request: unknown, options: CreateOptions): Promise<RolloutRecord> {
  const body = parseBody(createRolloutRequest, request)
  const problems: string[] = []
  const profile = profileAndNodeType(options.catalogue, body.chain_profile_id, body.node_type, problems)
  if (!profile) throw invalid(problems)
  const tuning = resolveTuning(body, problems)

  let target: Pick<NewRollout, 'binary_name' | 'target_version' | 'target_binary_url' | 'target_binary_checksum'> & {
    migration_type: MigrationType
    upgrade_id: string | null
    manifest: UpgradeManifest | null
  }
  if (body.upgrade_id !== undefined) {
    const manifest = await loadUpgradeManifest(options.configDir ?? options.catalogue.configDir, profile.id, body.upgrade_id, profile)
    const sent: [string, string | undefined, string][] = [
      ['binary_name', body.binary_name, manifest.binary_name],
      ['target_version', body.target_version, manifest.target_version],
      ['target_binary_url', body.target_binary_url, manifest.target_binary_url ?? '(none: the artifact store)'],
      ['target_binary_checksum', body.target_binary_checksum, manifest.target_binary_checksum],
      ['migration_type', body.migration_type, manifest.migration_type],
    ]
    for (const [field, value, fromManifest] of sent) {
      if (value !== undefined && value !== fromManifest) problems.push(`body.${field}: "${value}" disagrees with upgrade ${manifest.upgrade_id}, which says "${fromManifest}" (leave it out in auto mode)`)
    }
    const url = await targetUrl(
      db,
      `upgrades/${profile.id}/${manifest.upgrade_id}.yaml: artifact`,
      manifest.target_binary_url,
      { binary_name: manifest.binary_name, version: manifest.target_version, checksum: manifest.target_binary_checksum },
      profile,
      options,
      problems,
    )
    const compatible = manifest.data.state_compatibility.compatible_source_versions
    if (!compatible.includes(body.source_version)) {
      problems.push(`body.source_version: upgrade ${manifest.upgrade_id} applies to ${compatible.join(', ')}, not ${body.source_version}`)
    } else if (!(await artifactOf(db, options.catalogue, profile.id, body.source_version, { nodeType: body.node_type }))) {
      // As in manual mode (below): the nodes must be able to go back.
      problems.push(noWayBack(profile, body.source_version))
    }
    target = {
      binary_name: manifest.binary_name,
      target_version: manifest.target_version,
      target_binary_url: url,
      target_binary_checksum: manifest.target_binary_checksum,
      migration_type: manifest.migration_type,
      upgrade_id: manifest.upgrade_id,
      manifest,
    }
  } else {
    // A node that fails its health validation goes back to source_version, and a full rollback
    // upgrades the succeeded nodes back to it: both need its artifact, a release of the chain
    // profile or the one a rollout installed it with (node-upgrade.ts, artifactOf). Without one,
    // those nodes would end failed_rollback/degraded, or silently on the target after a
    // rollback; refuse it here instead.
    if (!(await artifactOf(db, options.catalogue, profile.id, body.source_version, { nodeType: body.node_type }))) problems.push(noWayBack(profile, body.source_version))
    if (body.binary_name !== undefined && body.binary_name !== profile.binary_name) problems.push(oneBinaryProblem('body.binary_name', profile, body.binary_name))
    // The schema made binary_name, target_version and target_binary_checksum required in manual
    // mode; without target_binary_url they name a stored artifact.
    const url = await targetUrl(
      db,
      body.target_binary_url === undefined ? 'body.target_binary_checksum' : 'body.target_binary_url',
      body.target_binary_url,
      { binary_name: body.binary_name as string, version: body.target_version as string, checksum: body.target_binary_checksum as string },
      profile,
      options,
      problems,
    )
    target = {
      binary_name: body.binary_name as string,
      target_version: body.target_version as string,
      target_binary_url: url,
      target_binary_checksum: body.target_binary_checksum as string,
      migration_type: body.migration_type ?? 'non_breaking',
      upgrade_id: null,
      manifest: null,
    }
  }
  if (target.target_version === body.source_version) problems.push(`body.source_version: equals the target version ${target.target_version}; nothing to upgrade`)
  let scheduledAt: Date | null = null
  if (body.scheduled_at !== undefined) {
    scheduledAt = new Date(body.scheduled_at)
    if (scheduledAt.getTime() <= options.now.getTime()) problems.push(`body.scheduled_at: ${body.scheduled_at} is not in the future (now ${options.now.toISOString()})`)
    else if (scheduledAt.getTime() > options.now.getTime() + MAX_SCHEDULE_AHEAD_MS) problems.push(`body.scheduled_at: ${body.scheduled_at} is more than ${MAX_SCHEDULE_AHEAD_DAYS} days ahead (now ${options.now.toISOString()})`)
  }
  if (problems.length > 0) throw invalid(problems)

  const group = await findActiveGroup(db, profile.id)
  if (group) {
    throw new ConflictError(`chain ${profile.id} has an active rollout group (${group.id}, ${group.status})`, `its component rollouts would collide with this one; finish or cancel group ${group.id} first`)
  }
  return insertRollout(
    db,
    {
      chain_profile_id: profile.id,
      node_type: body.node_type,
      source_version: body.source_version,
      binary_name: target.binary_name,
      target_version: target.target_version,
      target_binary_url: target.target_binary_url,
      target_binary_checksum: target.target_binary_checksum,
      migration_type: target.migration_type,
      upgrade_id: target.upgrade_id,
      manifest_content_hash: target.manifest?.manifest_content_hash ?? null,
      manifest: target.manifest?.data ?? null,
      ...tuning,
      created_by: options.createdBy,
      reason: body.reason ?? null,
      scheduled_at: scheduledAt,
    },
    options.now,
  )
}

/**
 * POST /api/v1/rollout-groups: a `pending` group whose component_order is resolved to full
 * entries (binary_name, version, url, checksum, upgrade_id) from manifests, or from the chain
 * profile's releases where no upgrade_id is given. Nothing is started, no rollout is created.
 */
export async function createRolloutGroup(db: Queryable, request: unknown, options: CreateOptions): Promise<RolloutGroupRecord> {
  const body = parseBody(createGroupRequest, request)
  const problems: string[] = []
  const profile = profileAndNodeType(options.catalogue, body.chain_profile_id, body.node_type, problems)
  if (!profile) throw invalid(problems)
  const tuning = resolveTuning(body, problems)
  const configDir = options.configDir ?? options.catalogue.configDir

  const components: GroupComponent[] = []
  for (const [i, entry] of body.component_order.entries()) {
    const at = `body.component_order[${i}]`
    checkNodeType(profile, entry.node_type, problems, `${at}.node_type`)
    if (entry.binary_name !== profile.binary_name) {
      problems.push(oneBinaryProblem(`${at}.binary_name`, profile, entry.binary_name))
      continue
    }
    // The same binary may step through versions (1.1.0, then 1.2.0), each its own component.
    if (body.component_order.findIndex((o) => o.binary_name === entry.binary_name && o.node_type === entry.node_type && o.version === entry.version) !== i) {
      problems.push(`${at}: ${entry.binary_name} ${entry.version} for ${entry.node_type} nodes is listed twice`)
      continue
    }
    if (entry.upgrade_id !== undefined) {
      let manifest: UpgradeManifest
      try {
        manifest = await loadUpgradeManifest(configDir, profile.id, entry.upgrade_id, profile)
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err
        problems.push(`${at}.upgrade_id: ${err.details}`)
        continue
      }
      if (manifest.binary_name !== entry.binary_name) problems.push(`${at}.binary_name: upgrade ${manifest.upgrade_id} upgrades ${manifest.binary_name}, not ${entry.binary_name}`)
      if (manifest.target_version !== entry.version) problems.push(`${at}.version: upgrade ${manifest.upgrade_id} targets ${manifest.target_version}, not ${entry.version}`)
      const url = await targetUrl(
        db,
        `${at}.upgrade_id: upgrades/${profile.id}/${manifest.upgrade_id}.yaml: artifact`,
        manifest.target_binary_url,
        { binary_name: manifest.binary_name, version: manifest.target_version, checksum: manifest.target_binary_checksum },
        profile,
        options,
        problems,
      )
      components.push({
        binary_name: entry.binary_name,
        node_type: entry.node_type,
        version: entry.version,
        url,
        checksum: manifest.target_binary_checksum,
        upgrade_id: manifest.upgrade_id,
        migration_type: manifest.migration_type,
        manifest_content_hash: manifest.manifest_content_hash,
        manifest: manifest.data,
      })
      continue
    }
    const release = profile.releases.find((r) => r.version === entry.version)
    if (!release) {
      problems.push(`${at}.version: chain ${profile.id} has no release ${entry.version} (releases: ${profile.releases.map((r) => r.version).join(', ')}); give an upgrade_id for another version`)
      continue
    }
    components.push({
      binary_name: entry.binary_name,
      node_type: entry.node_type,
      version: entry.version,
      url: release.url,
      checksum: `sha256:${release.sha256}`,
      upgrade_id: null,
      migration_type: 'non_breaking',
      manifest_content_hash: null,
      manifest: null,
    })
  }

  const fromComponents = Object.fromEntries(body.component_order.map((c) => [c.binary_name, c.version]))
  if (body.desired_versions !== undefined) {
    for (const [binary, version] of Object.entries(body.desired_versions)) {
      if (!(binary in fromComponents)) problems.push(`body.desired_versions.${binary}: no component upgrades ${binary}`)
      else if (fromComponents[binary] !== version) problems.push(`body.desired_versions.${binary}: ${version}, but its component upgrades to ${fromComponents[binary]}`)
    }
    for (const binary of Object.keys(fromComponents)) {
      if (!(binary in body.desired_versions)) problems.push(`body.desired_versions: lacks ${binary} (component_order upgrades it)`)
    }
  }
  if (problems.length > 0) throw invalid(problems)

  const active = await findActiveRollout(db, profile.id)
  if (active) {
    throw new ConflictError(`chain ${profile.id} has an active rollout (${active.id}, ${active.status})`, `the group's component rollouts would collide with it; finish or cancel rollout ${active.id} first`)
  }
  return insertRolloutGroup(
    db,
    {
      chain_profile_id: profile.id,
      node_type: body.node_type,
      failure_policy: body.failure_policy,
      component_order: components,
      desired_versions: body.desired_versions ?? fromComponents,
      ...tuning,
      created_by: options.createdBy,
      reason: body.reason ?? null,
    },
    options.now,
  )
}

/**
 * The rollout of one group component, for the group workflow to insert (`insertRollout`) when
 * the component's turn comes: the group's tuning, the component's resolved target.
 */
export function componentRollout(group: RolloutGroupRecord, componentIndex: number, options: { sourceVersion: string; reason?: string | null }): NewRollout {
  const component = group.component_order[componentIndex]
  if (!component) throw new ValidationError(`rollout group ${group.id} has no component ${componentIndex}`)
  return {
    group_id: group.id,
    component_index: componentIndex,
    upgrade_id: component.upgrade_id,
    chain_profile_id: group.chain_profile_id,
    node_type: component.node_type,
    binary_name: component.binary_name,
    source_version: options.sourceVersion,
    target_version: component.version,
    target_binary_url: component.url,
    target_binary_checksum: component.checksum,
    strategy: group.strategy,
    batch_size: group.batch_size,
    canary_size: group.canary_size,
    failure_threshold: group.failure_threshold,
    health_wait_duration_ms: group.health_wait_duration_ms,
    migration_type: component.migration_type,
    manifest_content_hash: component.manifest_content_hash,
    manifest: component.manifest,
    created_by: group.created_by,
    reason: options.reason ?? group.reason,
  }
}
