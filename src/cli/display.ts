/**
 * Human output of the user and API key commands (the `--json` output is the commands' return
 * value, src/cli/views.ts). Functions return text; the command prints it.
 */
import { apiKeyStatus, type ApiKeyItem, type Me, type UserView } from './views.js'

export interface Column<T> {
  header: string
  value: (row: T) => string
}

/** A plain aligned table: header, rule, rows; the last column is not padded. */
export function renderTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
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
