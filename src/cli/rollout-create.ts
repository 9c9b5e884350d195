/**
 * The request bodies of `rollout create` and `rollout-group create`, from flags (and a JSON file
 * for groups). Only what the flags themselves can get wrong is checked here, in the flags' own
 * words; every rule of the API (docs/rollouts.md) stays the API's, which answers 400 (exit 2).
 */
import fs from 'node:fs'
import type { CreateGroupRequest, CreateRolloutRequest } from '../rollouts/create.js'
import { ValidationError } from '../errors.js'

export interface RolloutFlags {
  chain: string
  'node-type': string
  'source-version': string
  'upgrade-id'?: string | undefined
  artifact?: string | undefined
  'binary-name'?: string | undefined
  'target-version'?: string | undefined
  'target-url'?: string | undefined
  'target-checksum'?: string | undefined
  'migration-type'?: string | undefined
  strategy?: string | undefined
  'batch-size'?: number | undefined
  'canary-size'?: number | undefined
  'failure-threshold'?: string | undefined
  'health-wait'?: string | undefined
  'scheduled-at'?: string | undefined
  reason?: string | undefined
}

// Without --target-url the three name a stored artifact (docs/artifacts.md): the API needs no URL.
const MANUAL_FLAGS = ['binary-name', 'target-version', 'target-checksum'] as const
const ARTIFACT_EXCLUDES = ['upgrade-id', 'binary-name', 'target-version', 'target-url'] as const

export interface ArtifactName {
  binary_name: string
  version: string
}

/**
 * `--artifact BINARY@VERSION`: a stored artifact, whose digest the command then reads from the
 * API (GET /api/v1/artifacts/{binary}/{version}) unless --target-checksum pins it. Undefined
 * without the flag.
 */
export function artifactFromFlags(flags: RolloutFlags): ArtifactName | undefined {
  if (flags.artifact === undefined) return undefined
  const conflicting = ARTIFACT_EXCLUDES.filter((f) => flags[f] !== undefined)
  if (conflicting.length > 0) {
    throw new ValidationError(`--artifact names the binary and version itself: drop ${conflicting.map((f) => `--${f}`).join(', ')}`, 'a stored artifact comes from the artifact store, never from a URL (docs/artifacts.md)')
  }
  const at = flags.artifact.lastIndexOf('@')
  const binary = flags.artifact.slice(0, at)
  const version = flags.artifact.slice(at + 1)
  if (at <= 0 || version === '') {
    throw new ValidationError(`--artifact "${flags.artifact.slice(0, 100)}" must be BINARY@VERSION`, 'for example --artifact devnet-node@1.2.0 (`nodeplane artifact list` shows what is stored)')
  }
  return { binary_name: binary, version }
}

/** The API path of a stored artifact. */
export function artifactPath(artifact: ArtifactName): string {
  return `/artifacts/${encodeURIComponent(artifact.binary_name)}/${encodeURIComponent(artifact.version)}`
}

export function parseThreshold(text: string | undefined): number | undefined {
  if (text === undefined) return undefined
  const value = Number(text)
  if (text.trim() === '' || !Number.isFinite(value) || value < 0 || value > 1) {
    throw new ValidationError(`--failure-threshold must be a fraction between 0.0 and 1.0, got "${text}"`, 'for example --failure-threshold 0.2 (pause once more than a fifth of the attempted nodes failed)')
  }
  return value
}

type Tuning = Pick<CreateRolloutRequest, 'strategy' | 'batch_size' | 'canary_size' | 'failure_threshold' | 'health_wait_duration' | 'reason'>

export function tuningFromFlags(flags: Pick<RolloutFlags, 'strategy' | 'batch-size' | 'canary-size' | 'failure-threshold' | 'health-wait' | 'reason'>): Tuning {
  const tuning: Tuning = {}
  if (flags.strategy !== undefined) tuning.strategy = flags.strategy as Tuning['strategy']
  if (flags['batch-size'] !== undefined) tuning.batch_size = flags['batch-size']
  if (flags['canary-size'] !== undefined) tuning.canary_size = flags['canary-size']
  const threshold = parseThreshold(flags['failure-threshold'])
  if (threshold !== undefined) tuning.failure_threshold = threshold
  if (flags['health-wait'] !== undefined) tuning.health_wait_duration = flags['health-wait']
  if (flags.reason !== undefined) tuning.reason = flags.reason
  return tuning
}

/**
 * The request body. With --artifact, `storedChecksum` is the stored artifact's digest as the API
 * gave it (ignored when --target-checksum pins one).
 */
export function rolloutRequest(flags: RolloutFlags, storedChecksum?: string): CreateRolloutRequest {
  const artifact = artifactFromFlags(flags)
  if (flags['upgrade-id'] === undefined && artifact === undefined) {
    const missing = MANUAL_FLAGS.filter((f) => flags[f] === undefined)
    if (missing.length > 0) {
      throw new ValidationError(
        `manual mode (no --upgrade-id) needs --artifact BINARY@VERSION, or ${missing.map((f) => `--${f}`).join(', ')}`,
        'give --upgrade-id to take them from an upgrade manifest (upgrades/<chain>/<upgrade-id>.yaml), --artifact for a stored artifact, or --binary-name, --target-version and --target-checksum (with --target-url only for a URL under ARTIFACT_ALLOWED_SOURCES on the api-server)',
      )
    }
  }
  const checksum = flags['target-checksum'] ?? (artifact ? storedChecksum : undefined)
  if (artifact && checksum === undefined) throw new ValidationError(`no digest for --artifact ${artifact.binary_name}@${artifact.version}`, 'give --target-checksum, or let the command read it from the API')
  const body: CreateRolloutRequest = {
    chain_profile_id: flags.chain,
    node_type: flags['node-type'],
    source_version: flags['source-version'],
    ...tuningFromFlags(flags),
  }
  if (flags['upgrade-id'] !== undefined) body.upgrade_id = flags['upgrade-id']
  // In auto mode these pin the manifest's values: the API refuses a rollout when they disagree.
  if (flags['binary-name'] !== undefined) body.binary_name = flags['binary-name']
  if (flags['target-version'] !== undefined) body.target_version = flags['target-version']
  if (artifact) {
    body.binary_name = artifact.binary_name
    body.target_version = artifact.version
  }
  if (flags['target-url'] !== undefined) body.target_binary_url = flags['target-url']
  if (checksum !== undefined) body.target_binary_checksum = checksum
  if (flags['migration-type'] !== undefined) body.migration_type = flags['migration-type'] as CreateRolloutRequest['migration_type']
  if (flags['scheduled-at'] !== undefined) body.scheduled_at = flags['scheduled-at']
  return body
}

export interface GroupFlags {
  file?: string | undefined
  chain?: string | undefined
  'node-type'?: string | undefined
  'failure-policy'?: string | undefined
  component?: string[] | undefined
  strategy?: string | undefined
  'batch-size'?: number | undefined
  'canary-size'?: number | undefined
  'failure-threshold'?: string | undefined
  'health-wait'?: string | undefined
  reason?: string | undefined
}

type Component = CreateGroupRequest['component_order'][number]

/** `BINARY:VERSION[:UPGRADE_ID]`; the node type is the group's --node-type. */
export function parseComponent(text: string, nodeType: string | undefined): Component {
  const parts = text.split(':')
  const [binary, version, upgradeId] = parts
  if (parts.length < 2 || parts.length > 3 || !binary || !version || (parts.length === 3 && !upgradeId)) {
    throw new ValidationError(`--component "${text.slice(0, 80)}" must be BINARY:VERSION or BINARY:VERSION:UPGRADE_ID`, 'for example --component devnet-node:1.1.0 or --component devnet-node:1.1.0:devnet-1.1.0')
  }
  if (nodeType === undefined) throw new ValidationError('--component needs --node-type (or a --file with node_type)')
  return { binary_name: binary, node_type: nodeType, version, ...(upgradeId ? { upgrade_id: upgradeId } : {}) }
}

function readGroupFile(file: string): Record<string, unknown> {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    throw new ValidationError(`cannot read --file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new ValidationError(`--file ${file} is not JSON: ${(err as Error).message}`, 'it holds the body of POST /api/v1/rollout-groups (docs/rollouts.md, "Creating a rollout group")')
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ValidationError(`--file ${file} must hold one JSON object`, 'the body of POST /api/v1/rollout-groups')
  return parsed as Record<string, unknown>
}

/**
 * The group's body: the --file's object (the API's request, as is), with each flag given
 * replacing its field; --component entries replace the file's component_order.
 */
export function groupRequest(flags: GroupFlags): Record<string, unknown> {
  const body: Record<string, unknown> = flags.file !== undefined ? readGroupFile(flags.file) : {}
  if (flags.chain !== undefined) body.chain_profile_id = flags.chain
  if (flags['node-type'] !== undefined) body.node_type = flags['node-type']
  if (flags['failure-policy'] !== undefined) body.failure_policy = flags['failure-policy']
  Object.assign(body, tuningFromFlags(flags))
  if (flags.component !== undefined && flags.component.length > 0) {
    const nodeType = typeof body.node_type === 'string' ? body.node_type : undefined
    body.component_order = flags.component.map((c) => parseComponent(c, nodeType))
  }
  const missing = [
    body.chain_profile_id === undefined ? '--chain' : null,
    body.node_type === undefined ? '--node-type' : null,
    body.failure_policy === undefined ? '--failure-policy' : null,
    body.component_order === undefined ? '--component' : null,
  ].filter((m): m is string => m !== null)
  if (missing.length > 0) throw new ValidationError(`a rollout group needs ${missing.join(', ')}`, 'give them as flags, or in a --file holding the body of POST /api/v1/rollout-groups')
  return body
}
