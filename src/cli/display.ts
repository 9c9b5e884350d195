/**
 * Human output of the user and API key commands (the `--json` output is the commands' return
 * value, src/cli/views.ts). Functions return text; the command prints it.
 */
import * as Flags from '@oclif/core/flags'
import { ValidationError } from '../errors.js'
import { apiKeyStatus, type ApiKeyItem, type Me, type UserView } from './views.js'

export interface Column<T> {
  header: string
  value: (row: T) => string
}

/** `--columns`: the columns a table shows, by header (case, spaces, '-' and '_' alike), in this order. */
let selectedColumns: string[] | undefined

export const columnsFlag = Flags.string({
  description: 'the table\'s columns, comma-separated, in this order (headers as printed: id,state,last-heartbeat); --json prints every field',
})

export function selectColumns(list: string): void {
  const names = list.split(',').map(columnKey).filter((n) => n.length > 0)
  if (names.length === 0) throw new ValidationError('--columns: name at least one column', 'e.g. --columns id,state')
  selectedColumns = names
}

function columnKey(header: string): string {
  return header.trim().toLowerCase().replace(/[\s_-]+/g, '-')
}

function pickColumns<T>(columns: readonly Column<T>[]): readonly Column<T>[] {
  if (selectedColumns === undefined) return columns
  const byKey = new Map(columns.map((c) => [columnKey(c.header), c]))
  const unknown = selectedColumns.filter((n) => !byKey.has(n))
  if (unknown.length > 0) throw new ValidationError(`--columns: no column ${unknown.join(', ')}`, `the columns are ${[...byKey.keys()].join(', ')}`)
  return selectedColumns.map((n) => byKey.get(n) as Column<T>)
}

/** A plain aligned table: header, rule, rows; the last column is not padded. */
export function renderTable<T>(rows: readonly T[], allColumns: readonly Column<T>[]): string {
  const columns = pickColumns(allColumns)
  const cells = rows.map((row) => columns.map((c) => c.value(row)))
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => (r[i] ?? '').length)))
  const line = (values: readonly string[]) =>
    values
      .map((v, i) => (i === values.length - 1 ? v : v.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd()
  return [line(columns.map((c) => c.header.toUpperCase())), line(widths.map((w) => '-'.repeat(w))), ...cells.map(line)].join('\n')
}

/** `2026-11-21T23:00:05.123Z` -> `2026-11-21 23:00Z`; null -> `fallback`. */
export function shortTime(iso: string | null | undefined, fallback = '-'): string {
  if (!iso) return fallback
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return iso
  return `${date.toISOString().slice(0, 16).replace('T', ' ')}Z`
}

export function renderUsers(users: readonly UserView[]): string {
  if (users.length === 0) return 'No users yet. Create one with `nodeplane user create --email E`.'
  return renderTable(users, [
    { header: 'id', value: (u) => u.id },
    { header: 'email', value: (u) => u.email ?? u.wallet_address ?? '-' },
    { header: 'admin', value: (u) => (u.is_admin ? 'yes' : 'no') },
    { header: 'created', value: (u) => shortTime(u.created_at) },
  ])
}

export function describeUser(user: UserView): string {
  return `${user.email ?? user.wallet_address ?? '(no email)'} (${user.id})${user.is_admin ? ', admin' : ''}`
}

export function renderApiKeys(keys: readonly ApiKeyItem[], now: Date = new Date()): string {
  if (keys.length === 0) return 'No API keys. Create one with `nodeplane api-key create --name N --scopes a,b`.'
  return renderTable(keys, [
    { header: 'id', value: (k) => k.id },
    { header: 'name', value: (k) => k.name },
    { header: 'prefix', value: (k) => `${k.key_prefix}…` },
    { header: 'scopes', value: (k) => k.scopes.join(',') },
    { header: 'status', value: (k) => apiKeyStatus(k, now) },
    { header: 'expires', value: (k) => shortTime(k.expires_at, 'never') },
    { header: 'last used', value: (k) => shortTime(k.last_used_at, 'never') },
  ])
}

export function renderMe(me: Me, apiUrl: string): string {
  const who = me.email ?? me.user_id
  const how = me.auth_method === 'api_key' && me.api_key_id ? `API key ${me.api_key_id}` : me.auth_method
  return [
    `${who} at ${apiUrl}`,
    `  user:   ${me.user_id}${me.is_admin ? ' (admin)' : ''}`,
    `  auth:   ${how}`,
    `  scopes: ${me.scopes.join(', ') || '(none)'}`,
  ].join('\n')
}

/** Goes to stderr right after a plaintext key is printed on stdout. */
export const KEY_SHOWN_ONCE = 'Store this key now (a secret manager, or `nodeplane login --with-key-stdin`): it will not be shown again.'
