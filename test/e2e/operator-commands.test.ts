import { afterEach, describe, expect, it } from 'vitest'
import { checkApiKey } from '../../src/auth/api-keys.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { nodeplane } from '../helpers/cli.js'

describe.each(DIALECTS)('operator commands on the database on %s (user * --direct-db, api-key issue)', (dialect) => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  it('creates users, refuses duplicates (4) and unknown users (3), and moves the admin flag', { timeout: 120_000 }, async () => {
    database = await createTestDatabase(dialect)
    const run = (args: string[]) => nodeplane(args, { env: { DATABASE_URL: database!.url } })

    const created = await run(['user', 'create', '--email', 'ops@example.com', '--admin', '--json', '--direct-db'])
    expect(created.exitCode).toBe(0)
    const ops = JSON.parse(created.stdout)
    expect(ops).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), email: 'ops@example.com', wallet_address: null, is_admin: true, disabled_at: null, created_at: expect.any(String) })

    const duplicate = await run(['user', 'create', '--email', 'OPS@example.com', '--json', '--direct-db'])
    expect(duplicate.exitCode).toBe(4)
    expect(JSON.parse(duplicate.stdout).error).toMatchObject({ name: 'ConflictError', exit_code: 4 })

    const unknown = await run(['user', 'grant-admin', '--user', 'nobody@example.com', '--direct-db'])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: no user nobody@example.com\n/)

    expect((await run(['user', 'create', '--email', 'dev@example.com', '--direct-db'])).exitCode).toBe(0)
    const granted = await run(['user', 'grant-admin', '--user', 'dev@example.com', '--json', '--direct-db'])
    expect(JSON.parse(granted.stdout)).toMatchObject({ email: 'dev@example.com', is_admin: true, changed: true })
    const revoked = await run(['user', 'revoke-admin', '--user', ops.id, '--yes', '--json', '--direct-db'])
    expect(JSON.parse(revoked.stdout)).toMatchObject({ id: ops.id, is_admin: false, changed: true, revoked_api_keys: [] })

    const list = await run(['user', 'list', '--json', '--direct-db'])
    expect(list.exitCode).toBe(0)
    expect(JSON.parse(list.stdout).users.map((u: { email: string; is_admin: boolean }) => [u.email, u.is_admin])).toEqual([
      ['ops@example.com', false],
      ['dev@example.com', true],
    ])
  })

  it('issues a key whose plaintext is shown once, admin keys only for admins, and revoke-admin disables them', { timeout: 120_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    const run = (args: string[]) => nodeplane(args, { env: { DATABASE_URL: database!.url } })
    expect((await run(['user', 'create', '--email', 'dev@example.com', '--direct-db'])).exitCode).toBe(0)
    expect((await run(['user', 'create', '--email', 'ops@example.com', '--admin', '--direct-db'])).exitCode).toBe(0)

    const json = await run(['api-key', 'issue', '--user', 'dev@example.com', '--name', 'ci', '--scopes', 'nodes:read, chains:read', '--expires-in', '30d', '--json'])
    expect(json.exitCode).toBe(0)
    const issued = JSON.parse(json.stdout)
    expect(issued).toEqual({ id: expect.any(String), key: expect.stringMatching(/^np_[A-Za-z0-9_-]{43}$/), scopes: ['nodes:read', 'chains:read'], expires_at: expect.any(String) })
    expect(Date.parse(issued.expires_at) - Date.now()).toBeGreaterThan(29 * 86_400_000)
    expect(await checkApiKey(db, issued.key)).toMatchObject({ ok: true, apiKey: { id: issued.id } })

    const notAdmin = await run(['api-key', 'issue', '--user', 'dev@example.com', '--name', 'x', '--scopes', 'nodes:read', '--admin'])
    expect(notAdmin.exitCode).toBe(4)
    expect(notAdmin.stderr).toContain('dev@example.com is not an admin')
    expect(notAdmin.stderr).toContain('nodeplane user grant-admin --user dev@example.com')

    const badScope = await run(['api-key', 'issue', '--user', 'dev@example.com', '--name', 'x', '--scopes', 'nodes:reed', '--json'])
    expect(badScope.exitCode).toBe(2)
    expect(JSON.parse(badScope.stdout).error.message).toContain('unknown scope "nodes:reed"')

    // The human form: the key alone on stdout (for `$(...)`), the warning on stderr.
    const human = await run(['api-key', 'issue', '--user', 'ops@example.com', '--name', 'break-glass', '--scopes', '*', '--admin', '--expires-in', '12h'])
    expect(human.exitCode).toBe(0)
    expect(human.stdout).toMatch(/^np_[A-Za-z0-9_-]{43}\n?$/)
    expect(human.stderr).toContain('it will not be shown again')
    const adminKey = human.stdout.trim()
    const check = await checkApiKey(db, adminKey)
    expect(check.ok && check.apiKey.scopes).toEqual(['*', 'admin'])

    const demoted = await run(['user', 'revoke-admin', '--user', 'ops@example.com', '--yes', '--json', '--direct-db'])
    expect(JSON.parse(demoted.stdout).revoked_api_keys).toEqual([check.ok ? check.apiKey.id : ''])
    expect(await checkApiKey(db, adminKey)).toEqual({ ok: false, reason: 'revoked' })
  })
})
