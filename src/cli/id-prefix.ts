/**
 * Unique id prefixes (the short ids tables print) wherever a command takes an id. Over the API a
 * prefix is resolved against the list the key can see (GET of the collection, every page), so
 * another user's object never resolves; in the database (operator commands) with a prefix
 * query. A full UUID, or anything that is not hex, is passed on as it is.
 */
import type { Db } from '../db/knex.js'
import { isUuid } from '../db/ids.js'
import { NotFoundError, ValidationError } from '../errors.js'
import type { ApiClient } from './api-client.js'
import { listAll } from './pages.js'

/** At least 4 hex digits (hyphens allowed as in a UUID), shorter than a whole UUID. */
const PREFIX = /^[0-9a-f][0-9a-f-]{3,34}$/i
/** Candidates named in an ambiguity error. */
const MAX_CANDIDATES = 10

export type ListedKind = 'node' | 'subscription' | 'payment' | 'incident' | 'rollout' | 'api-key' | 'host' | 'workflow-run' | 'user'

interface Kind {
  noun: string
  plural: string
  path: string
  list: string
}

const KINDS: Record<ListedKind, Kind> = {
  node: { noun: 'node', plural: 'nodes', path: '/nodes', list: 'node list' },
  subscription: { noun: 'subscription', plural: 'subscriptions', path: '/subscriptions', list: 'subscription list' },
  payment: { noun: 'payment', plural: 'payments', path: '/payments', list: 'payment list' },
  incident: { noun: 'incident', plural: 'incidents', path: '/incidents', list: 'incident list' },
  rollout: { noun: 'rollout', plural: 'rollouts', path: '/rollouts', list: 'rollout list' },
  'api-key': { noun: 'API key', plural: 'API keys', path: '/api-keys', list: 'api-key list' },
  host: { noun: 'host', plural: 'hosts', path: '/hosts', list: 'host list' },
  // Admin keys only: the server answers 403 to others before anything is listed.
  'workflow-run': { noun: 'workflow run', plural: 'workflow runs', path: '/admin/workflow-runs', list: 'workflow list' },
  user: { noun: 'user', plural: 'users', path: '/admin/users', list: 'user list' },
}

export function isIdPrefix(value: string): boolean {
  return !isUuid(value) && PREFIX.test(value)
}

/** The full id a value names: itself, or the one id of `kind` the key can see that starts with it. */
export async function resolveApiId(api: ApiClient, kind: ListedKind, value: string): Promise<string> {
  if (!isIdPrefix(value)) return value
  const k = KINDS[kind]
  // Hosts: a name that looks like hex (say "cafe") is still a name; removed ones are listed only on request.
  const items = await listAll<{ id: string; name?: string }>(api, kind === 'host' ? '/hosts' : k.path)
  if (kind === 'host' && items.some((h) => h.name === value)) return value
  const prefix = value.toLowerCase()
  return pickOne(k, value, items.filter((i) => i.id.startsWith(prefix)).map((i) => i.id))
}

/** The same in the control-plane database, for the operator commands that read it directly. */
export async function resolveDbId(db: Db, table: 'nodes' | 'users' | 'workflow_runs', noun: string, list: string, value: string): Promise<string> {
  if (!isIdPrefix(value)) return value
  const rows = await db(table)
    .whereRaw('CAST(id AS TEXT) LIKE ?', [`${value.toLowerCase()}%`])
    .select('id')
    .limit(MAX_CANDIDATES + 1)
  return pickOne({ noun, plural: `${noun}s`, path: table, list }, value, rows.map((r: { id: string }) => String(r.id)))
}

function pickOne(kind: Kind, value: string, ids: string[]): string {
  const [only, ...others] = ids
  if (only !== undefined && others.length === 0) return only
  if (only === undefined) throw new NotFoundError(`no ${kind.noun} whose id starts with ${value} among the ${kind.plural} you can see`, `list them with \`nodeplane ${kind.list}\``)
  const shown = ids.slice(0, MAX_CANDIDATES)
  throw new ValidationError(
    `the id prefix ${value} is ambiguous: it matches ${ids.length > MAX_CANDIDATES ? `more than ${MAX_CANDIDATES}` : ids.length} ${kind.plural}`,
    `give more of the id; candidates: ${shown.join(', ')}`,
  )
}
