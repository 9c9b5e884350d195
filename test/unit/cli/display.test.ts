import { describe, expect, it } from 'vitest'
import { renderApiKeys, renderTable, shortIds, shortTime } from '../../../src/cli/display.js'
import { parseExpiresIn, parseScopes } from '../../../src/cli/key-flags.js'
import { listAll } from '../../../src/cli/pages.js'
import type { ApiClient } from '../../../src/cli/api-client.js'
import type { ApiKeyItem } from '../../../src/cli/views.js'
import { ValidationError } from '../../../src/errors.js'

describe('CLI rendering and flag parsing', () => {
  it('aligns table columns', () => {
    const text = renderTable([{ a: 'x', b: 'long value' }, { a: 'longer', b: 'y' }], [
      { header: 'a', value: (r) => r.a },
      { header: 'b', value: (r) => r.b },
    ])
    expect(text.split('\n')).toEqual(['A       B', '------  ----------', 'x       long value', 'longer  y'])
  })

  it('fits a terminal: the widest free-text column is cut with …, ids and states never', () => {
    const rows = [{ id: '0193a1b2-7c3f-7000-8000-000000000001', state: 'down', title: 'the chain process exited with code 137 three times' }]
    const columns = [
      { header: 'id', value: (r: (typeof rows)[0]) => r.id, id: true },
      { header: 'state', value: (r: (typeof rows)[0]) => r.state, state: true },
      { header: 'title', value: (r: (typeof rows)[0]) => r.title },
    ]
    const fitted = renderTable(rows, columns, { width: 40, colour: true, shortIds: true }).split('\n')
    expect(fitted[2]).toBe('0193a1b2  \u001b[31mdown\u001b[39m   the chain process exit…')
    expect(fitted.every((l) => l.replace(/\u001b\[\d+m/g, '').length <= 40)).toBe(true)
    const whole = renderTable(rows, columns, { width: undefined, colour: false, shortIds: false }).split('\n')
    expect(whole[2]).toBe(`${rows[0]?.id}  down   ${rows[0]?.title}`)
  })

  it('shortens UUIDs to the shortest prefix unique among them, at least 8 characters, never ending on a hyphen', () => {
    const a = '0193a1b2-7c3f-7000-8000-000000000001'
    const b = '0193a1b2-7c40-7000-8000-000000000002'
    const c = '0193a1b2-7c40-7111-8000-000000000003'
    const d = '0294ffff-0000-7000-8000-000000000004'
    expect(Object.fromEntries(shortIds([a, b, c, d, 'k1']))).toEqual({ [a]: '0193a1b2-7c3', [b]: '0193a1b2-7c40-70', [c]: '0193a1b2-7c40-71', [d]: '0294ffff' })
  })

  it('lists keys with prefix and status, never more of the key', () => {
    const now = new Date('2026-01-02T00:00:00Z')
    const base = { name: 'ci', key_prefix: 'np_abcdefg', scopes: ['nodes:read'], created_at: '2026-01-01T00:00:00Z', expires_at: null }
    const keys: ApiKeyItem[] = [
      { ...base, id: 'k1', last_used_at: '2026-01-01T12:30:59Z' },
      { ...base, id: 'k2', revoked_at: '2026-01-01T13:00:00Z' },
      { ...base, id: 'k3', expires_at: '2026-01-01T14:00:00Z' },
    ]
    const lines = renderApiKeys(keys, now).split('\n')
    expect(lines[0]).toMatch(/^ID\s+NAME\s+PREFIX\s+SCOPES\s+STATUS\s+EXPIRES\s+LAST USED$/)
    expect(lines[2]).toMatch(/^k1\s+ci\s+np_abcdefg…\s+nodes:read\s+active\s+never\s+11h ago$/)
    expect(lines[3]).toContain('revoked')
    expect(lines[4]).toContain('expired')
    expect(shortTime(null, 'never')).toBe('never')
  })

  it('parses --scopes and --expires-in, rejecting nonsense with exit-2 errors', () => {
    expect(parseScopes(' nodes:read, chains:read,,nodes:read ')).toEqual(['nodes:read', 'chains:read'])
    expect(() => parseScopes(' , ')).toThrow(ValidationError)
    const now = new Date('2026-01-01T00:00:00Z')
    expect(parseExpiresIn('30d', now)?.toISOString()).toBe('2026-01-31T00:00:00.000Z')
    expect(parseExpiresIn(undefined, now)).toBeNull()
    expect(() => parseExpiresIn('a month', now)).toThrow(/--expires-in: "a month" is not a duration/)
  })

  it('follows next_cursor to the end, or stops at --limit', async () => {
    const pages: Record<string, { items: number[]; next_cursor: string | null }> = {
      first: { items: [1, 2], next_cursor: 'c2' },
      c2: { items: [3, 4], next_cursor: 'c3' },
      c3: { items: [5], next_cursor: null },
    }
    const asked: Array<Record<string, unknown>> = []
    const api = {
      get: async (_path: string, query: { limit: number; cursor?: string }) => {
        asked.push({ ...query })
        return pages[query.cursor ?? 'first']
      },
    } as unknown as ApiClient
    expect(await listAll<number>(api, '/api-keys')).toEqual([1, 2, 3, 4, 5])
    expect(await listAll<number>(api, '/api-keys', 3)).toEqual([1, 2, 3])
    expect(asked.at(-1)).toEqual({ limit: 1, cursor: 'c2' })
  })
})
