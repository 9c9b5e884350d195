/** The `artifacts` table: one exported function per operation; the caller owns the transaction. */
import { fromJson, toDate } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import { ACTIVE_GROUP_STATUSES, ACTIVE_ROLLOUT_STATUSES } from '../rollouts/states.js'

export interface ArtifactRecord {
  id: string
  binary_name: string
  version: string
  /** Lowercase hex. */
  sha256: string
  size_bytes: number
  /** base64 Ed25519 signature; null: unsigned. */
  signature: string | null
  key_id: string | null
  created_at: Date
}

export type NewArtifact = Omit<ArtifactRecord, 'id' | 'created_at'>

function fromRow(row: Record<keyof ArtifactRecord, unknown>): ArtifactRecord {
  return {
    id: String(row.id),
    binary_name: String(row.binary_name),
    version: String(row.version),
    sha256: String(row.sha256),
    size_bytes: Number(row.size_bytes),
    signature: (row.signature as string | null) ?? null,
    key_id: (row.key_id as string | null) ?? null,
    created_at: toDate(row.created_at),
  }
}

/** ConflictError when (binary_name, version) is already stored. */
export async function insertArtifact(db: Queryable, artifact: NewArtifact, now: Date): Promise<ArtifactRecord> {
  const row = { id: uuidv7(now.getTime()), ...artifact, created_at: now }
  try {
    await db('artifacts').insert(row)
  } catch (err) {
    if (isUniqueViolation(err)) throw alreadyStored(artifact)
    throw err
  }
  return row
}

export function alreadyStored(artifact: Pick<ArtifactRecord, 'binary_name' | 'version'>): ConflictError {
  return new ConflictError(
    `${artifact.binary_name} ${artifact.version} is already in the artifact store`,
    'a released version never changes: give the new build a new version, or remove the stored one first (`nodeplane artifact remove`)',
  )
}

export async function findArtifact(db: Queryable, binaryName: string, version: string): Promise<ArtifactRecord | undefined> {
  const row = await db('artifacts').where({ binary_name: binaryName, version }).first()
  return row ? fromRow(row as Record<keyof ArtifactRecord, unknown>) : undefined
}

/** Oldest first within a binary; binaries by name. */
export async function listArtifacts(db: Queryable, filter: { binaryName?: string } = {}): Promise<ArtifactRecord[]> {
  const query = db('artifacts').orderBy([{ column: 'binary_name' }, { column: 'created_at' }, { column: 'id' }])
  if (filter.binaryName !== undefined) void query.where({ binary_name: filter.binaryName })
  return ((await query) as Record<keyof ArtifactRecord, unknown>[]).map(fromRow)
}

/** The release signature of the stored binary version with these bytes; undefined when not stored or unsigned. */
export async function storedSignature(db: Queryable, artifact: Pick<ArtifactRecord, 'binary_name' | 'version' | 'sha256'>): Promise<string | undefined> {
  const row = (await db('artifacts').where(artifact).first('signature')) as { signature: string | null } | undefined
  return row?.signature ?? undefined
}

/** Whether any stored artifact still has these bytes. */
export async function digestInUse(db: Queryable, sha256: string): Promise<boolean> {
  return (await db('artifacts').where({ sha256 }).first('id')) !== undefined
}

export async function deleteArtifact(db: Queryable, id: string): Promise<boolean> {
  return (await db('artifacts').where({ id }).del()) > 0
}

/**
 * Why the artifact rollouts name by `urls` (stored-url.ts, and the blob's file URL older rows
 * hold) must stay: an active rollout installs it or may roll nodes back to it, an active group
 * will, or nodes run the version a rollout installed from it (a later rollback to that version
 * fetches it again). Undefined when nothing needs it.
 */
export async function artifactInUse(db: Queryable, urls: readonly string[], artifact: Pick<ArtifactRecord, 'binary_name' | 'version'>): Promise<string | undefined> {
  const installing = (await db('rollouts').whereIn('target_binary_url', urls).whereIn('status', ACTIVE_ROLLOUT_STATUSES).first('id', 'status')) as { id: string; status: string } | undefined
  if (installing) return `rollout ${installing.id} (${installing.status}) installs it`
  const goingBack = (await db('rollout_nodes')
    .join('rollouts', 'rollouts.id', 'rollout_nodes.rollout_id')
    .whereIn('rollout_nodes.previous_binary_url', urls)
    .whereIn('rollouts.status', ACTIVE_ROLLOUT_STATUSES)
    .first('rollouts.id')) as { id: string } | undefined
  if (goingBack) return `rollout ${goingBack.id} may roll nodes back to it`
  // At most one active group per chain: few rows, read whole (jsonb has no LIKE on Postgres).
  const groups = (await db('rollout_groups').whereIn('status', ACTIVE_GROUP_STATUSES).select('id', 'component_order')) as Array<{ id: string; component_order: unknown }>
  const group = groups.find((g) => fromJson<Array<{ url?: string }>>(g.component_order).some((c) => c.url !== undefined && urls.includes(c.url)))
  if (group) return `rollout group ${group.id} will install it`
  const running = (await db('node_config_state')
    .join('nodes', 'nodes.id', 'node_config_state.node_id')
    .whereNot('nodes.state', 'terminated')
    .where('node_config_state.binary_version', artifact.version)
    .whereExists(db('rollouts').whereIn('target_binary_url', urls).where({ binary_name: artifact.binary_name }).whereRaw('rollouts.chain_profile_id = nodes.chain_profile_id').select('rollouts.id'))
    .count({ n: '*' })
    .first()) as { n: unknown } | undefined
  const nodes = Number(running?.n ?? 0)
  if (nodes > 0) return `${nodes} node(s) run ${artifact.version}, installed from it (going back to that version fetches it again)`
  return undefined
}
