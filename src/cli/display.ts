/**
 * Human output of the user and API key commands (the `--json` output is the commands' return
 * value, src/cli/views.ts). Functions return text; the command prints it.
 */
import * as Flags from '@oclif/core/flags'
import { isUuid } from '../db/ids.js'
import { ValidationError } from '../errors.js'
import { age } from './human-time.js'
import { output, paint, toneOf, type Output } from './terminal.js'
import { apiKeyStatus, type ApiKeyItem, type Me, type UserView } from './views.js'

export interface Column<T> {
  header: string
  value: (row: T) => string
  /** Ids (UUIDs): on a terminal, the shortest prefix unique among the column's ids, at least 8 characters. */
  id?: boolean
  /** A state word: coloured on a terminal (src/cli/terminal.ts). */
  state?: boolean
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

/** Cut short on a terminal only down to this, so a cut column still says something. */
const MIN_CUT_WIDTH = 8

/**
 * An aligned table: header, rule, rows; the last column is not padded. On a terminal (or with
 * COLUMNS set) the widest cut-able columns give up width until the table fits, their cells
 * ending in `…`; id and state columns are never cut. `--wide` prints everything whole.
 */
export function renderTable<T>(rows: readonly T[], allColumns: readonly Column<T>[], out: Output = output()): string {
  const columns = pickColumns(allColumns)
  const cells = rows.map((row) => columns.map((c) => c.value(row)))
  columns.forEach((c, i) => {
    if (!c.id || !out.shortIds) return
    const short = shortIds(cells.map((r) => r[i] ?? ''))
    for (const r of cells) r[i] = short.get(r[i] ?? '') ?? r[i] ?? ''
  })
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => (r[i] ?? '').length)))
  if (out.width !== undefined) fitWidths(widths, columns, out.width)
  const line = (values: readonly string[], tones?: readonly (boolean | undefined)[]) =>
    values
      .map((v, i) => {
        const width = widths[i] ?? 0
        const cut = v.length > width ? `${v.slice(0, Math.max(0, width - 1))}…` : v
        const padding = i === values.length - 1 ? '' : ' '.repeat(width - cut.length)
        return `${tones?.[i] ? paint(cut, toneOf(v), out.colour) : cut}${padding}`
      })
      .join('  ')
      .trimEnd()
  const tones = columns.map((c) => c.state)
  return [line(columns.map((c) => c.header.toUpperCase())), line(widths.map((w) => '-'.repeat(w))), ...cells.map((r) => line(r, tones))].join('\n')
}

function fitWidths<T>(widths: number[], columns: readonly Column<T>[], width: number): void {
  const floor = columns.map((c, i) => (c.id || c.state ? (widths[i] ?? 0) : Math.min(widths[i] ?? 0, Math.max(MIN_CUT_WIDTH, c.header.length))))
  let excess = widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1) - width
  while (excess > 0) {
    let widest = -1
    widths.forEach((w, i) => {
      if (w > (floor[i] ?? 0) && (widest < 0 || w > (widths[widest] ?? 0))) widest = i
    })
    if (widest < 0) return
    widths[widest] = (widths[widest] ?? 0) - 1
    excess -= 1
  }
}

/**
 * Each UUID's shortest prefix that no other id of the list shares, at least 8 characters, never
 * ending on a hyphen. UUIDv7 ids made within a minute share their first 8 digits (the time), so
 * the prefix reaches into the random part where it must; `resolveApiId` takes it back.
 */
export function shortIds(ids: readonly string[]): Map<string, string> {
  const sorted = [...new Set(ids.filter(isUuid))].sort()
  const common = (a = '', b = '') => {
    let n = 0
    while (n < a.length && a[n] === b[n]) n += 1
    return n
  }
  const short = new Map<string, string>()
  sorted.forEach((id, i) => {
    let length = Math.max(8, common(id, sorted[i - 1]) + 1, common(id, sorted[i + 1]) + 1)
    if (id[length - 1] === '-') length += 1
    short.set(id, id.slice(0, length))
  })
  return short
}

/** `2026-11-21T23:00:05.123Z` -> `2026-11-21 23:00Z`; null -> `fallback`. */
export function shortTime(iso: string | null | undefined, fallback = '-'): string {
  if (!iso) return fallback
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return iso
  return `${date.toISOString().slice(0, 16).replace('T', ' ')}Z`
}

export function renderUsers(users: readonly UserView[], now: Date = new Date()): string {
  if (users.length === 0) return 'No users yet. Create one with `nodeplane user create --email E`.'
  return renderTable(users, [
    { header: 'id', value: (u) => u.id, id: true },
    { header: 'email', value: (u) => u.email ?? u.wallet_address ?? '-' },
    { header: 'admin', value: (u) => (u.is_admin ? 'yes' : 'no') },
    { header: 'created', value: (u) => age(u.created_at, { now }) },
  ])
}

export function describeUser(user: UserView): string {
  return `${user.email ?? user.wallet_address ?? '(no email)'} (${user.id})${user.is_admin ? ', admin' : ''}`
}

export function renderApiKeys(keys: readonly ApiKeyItem[], now: Date = new Date()): string {
  if (keys.length === 0) return 'No API keys. Create one with `nodeplane api-key create --name N --scopes a,b`.'
  return renderTable(keys, [
    { header: 'id', value: (k) => k.id, id: true },
    { header: 'name', value: (k) => k.name },
    { header: 'prefix', value: (k) => `${k.key_prefix}…` },
    { header: 'scopes', value: (k) => k.scopes.join(',') },
    { header: 'status', value: (k) => apiKeyStatus(k, now), state: true },
    { header: 'expires', value: (k) => age(k.expires_at, { now, fallback: 'never' }) },
    { header: 'last used', value: (k) => age(k.last_used_at, { now, fallback: 'never' }) },
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
