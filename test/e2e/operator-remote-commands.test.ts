/**
 * Issue 20 item 4: the operator commands that used to write the database directly (`node
 * provision|migrate|terminate`, `workflow list|show`, `user create|list|grant-admin|revoke-admin`)
 * work remotely, through the built binary against an api-server (the daemon's own start function,
 * in this process; one per database): an admin key acts, a non-admin key is refused (77) and
 * never reaches another user's objects (3), bad input exits 2 with one line and writes nothing,
 * and `--direct-db` (bootstrap, break-glass) still acts on the database. Without a stack and
 * without a login, every one of them says how to log in or point at an API, and creates nothing.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startApiServer } from '../../daemons/api-server.js'
import { createApiKey } from '../../src/auth/api-keys.js'
import { createUser } from '../../src/auth/users.js'
import { createLocalBus } from '../../src/events/local-bus.js'
import { createLogger } from '../../src/log.js'
import { requestProvision } from '../../src/provisioning/triggers.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertTestNode, setNodeState } from '../helpers/fixtures.js'

const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T
/** The one-line reason: `Error: …` and at most one indented hint. */
const oneLineError = (r: CliResult): string => {
  const lines = r.stderr.trimEnd().split('\n')
  expect(lines.length, r.stderr).toBeLessThanOrEqual(2)
  expect(lines[0]).toMatch(/^Error: /)
  return lines[0] as string
}

describe('the operator commands without a stack and without a login', () => {
  it('say how to log in or point at an API, never "db migrate", and create nothing', { timeout: 60_000 }, async () => {
    const dir = tempDir()
    const home = tempDir()
    try {
      const env = { HOME: home, XDG_CONFIG_HOME: path.join(home, '.config') }
      const commands = [
        ['node', 'provision', '0190f5c2-0000-7000-8000-000000000000'],
        ['node', 'migrate', '0190f5c2-0000-7000-8000-000000000000'],
        ['node', 'terminate', '0190f5c2-0000-7000-8000-000000000000', '--yes'],
        ['workflow', 'list'],
        ['workflow', 'show', '0190f5c2-0000-7000-8000-000000000000'],
        ['user', 'list'],
        ['user', 'create', '--email', 'ops@example.test', '--admin'],
        ['user', 'grant-admin', 'ops@example.test'],
        ['user', 'revoke-admin', 'ops@example.test', '--yes'],
      ]
      const results = await Promise.all(commands.map((args) => nodeplane(args, { cwd: dir, env })))
      results.forEach((r, i) => {
        expect(r.exitCode, `${commands[i]?.join(' ')}: ${r.stderr}`).toBe(78)
        expect(r.stderr).toContain('nodeplane login')
        expect(r.stderr).toContain('--api-url')
        expect(r.stderr).not.toMatch(/db migrate/)
      })
      // The bootstrap case says where the first admin comes from.
      expect(results[6]?.stderr).toContain('--direct-db')
      expect(fs.readdirSync(dir)).toEqual([])
      expect(fs.readdirSync(home)).toEqual([])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
      fs.rmSync(home, { recursive: true, force: true })
    }
  })
})

describe.each(DIALECTS)('operator commands over the admin API on %s', (dialect) => {
  let t: TestDatabase
  let stop: (() => Promise<void>) | undefined
  const dir = tempDir()
  let adminEnv: Record<string, string>
  let userEnv: Record<string, string>
  let adminId: string
  const run = (args: string[], env: Record<string, string> = adminEnv) => nodeplane(args, { cwd: dir, env })

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    const bus = createLocalBus()
    const started = await startApiServer({ API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1', HTTP_BODY_LIMIT_BYTES: 64 * 1024 }, { db: t.db, bus, logger: createLogger({ level: 'silent' }) })
    stop = async () => {
      await started.stop()
      await bus.close()
    }
    const admin = await createUser(t.db, { email: 'ops@example.test', is_admin: true })
    adminId = admin.id
    const alice = await createUser(t.db, { email: 'alice@example.test' })
    const issue = (userId: string, scopes: string[], allowAdmin: boolean) =>
      t.db.transaction((trx) => createApiKey(trx, { userId, name: 'test', scopes, expiresAt: null, allowAdmin }, new Date()))
    const [adminKey, aliceKey] = await Promise.all([issue(admin.id, ['*', 'admin'], true), issue(alice.id, ['*'], false)])
    const base = { HOME: dir, NODEPLANE_API_URL: started.url }
    adminEnv = { ...base, NODEPLANE_API_KEY: adminKey.key }
    userEnv = { ...base, NODEPLANE_API_KEY: aliceKey.key }
  })
  afterAll(async () => {
    await stop?.()
    await t?.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('user create|list|grant-admin|revoke-admin with an admin key; refused without admin; bad input writes nothing', { timeout: 120_000 }, async () => {
    const created = await run(['user', 'create', '--email', 'dev@example.test', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const dev = json<{ id: string }>(created)
    expect(dev).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), email: 'dev@example.test', wallet_address: null, is_admin: false, disabled_at: null, created_at: expect.any(String) })

    const [duplicate, badEmail, longEmail, refused, unknown] = await Promise.all([
      run(['user', 'create', '--email', 'DEV@example.test']),
      run(['user', 'create', '--email', 'not an email', '--admin']),
      run(['user', 'create', '--email', `${'a'.repeat(400)}@example.test`]),
      run(['user', 'create', '--email', 'mallory@example.test', '--admin'], userEnv),
      run(['user', 'grant-admin', 'nobody@example.test']),
    ])
    expect(duplicate.exitCode).toBe(4)
    expect(oneLineError(duplicate)).toContain('already exists')
    expect(badEmail.exitCode).toBe(2)
    expect(oneLineError(badEmail)).toContain('"not an email" is not an email address')
    expect(longEmail.exitCode).toBe(2)
    expect(oneLineError(longEmail)).toContain('body.email')
    expect(refused.exitCode).toBe(77)
    expect(oneLineError(refused)).toContain('missing scope')
    expect(unknown.exitCode).toBe(3)
    expect(oneLineError(unknown)).toContain('no user nobody@example.test')
    expect(await t.db('users').orderBy(['created_at', 'id']).pluck('email')).toEqual(['ops@example.test', 'alice@example.test', 'dev@example.test'])

    const granted = await run(['user', 'grant-admin', dev.id.slice(0, 13), '--json'])
    expect(granted.exitCode, granted.stderr).toBe(0)
    expect(json(granted)).toMatchObject({ id: dev.id, is_admin: true, changed: true, revoked_api_keys: [] })
    await t.db.transaction((trx) => createApiKey(trx, { userId: dev.id, name: 'dev-admin', scopes: ['admin'], expiresAt: null, allowAdmin: true }, new Date()))

    const [revoked, self] = await Promise.all([
      run(['user', 'revoke-admin', 'dev@example.test', '--yes', '--json']),
      run(['user', 'revoke-admin', 'ops@example.test', '--yes']),
    ])
    expect(revoked.exitCode, revoked.stderr).toBe(0)
    const revokedKey = (await t.db('api_keys').where({ user_id: dev.id }).first('id', 'revoked_at')) as { id: string; revoked_at: unknown }
    expect(json(revoked)).toMatchObject({ id: dev.id, is_admin: false, changed: true, revoked_api_keys: [revokedKey.id] })
    expect(revokedKey.revoked_at).not.toBeNull()
    // The API never lets an admin demote themselves (the break-glass path can).
    expect(self.exitCode).toBe(4)
    expect(oneLineError(self)).toContain('cannot revoke your own admin flag')
    expect((await t.db('users').where({ id: adminId }).first('is_admin')).is_admin).toBeTruthy()
    const listed = await run(['user', 'list', '--json'])
    expect(listed.exitCode, listed.stderr).toBe(0)
    expect(json<{ users: { email: string; is_admin: boolean }[] }>(listed).users.map((u) => [u.email, Boolean(u.is_admin)])).toEqual([
      ['ops@example.test', true],
      ['alice@example.test', false],
      ['dev@example.test', false],
    ])

    // Break-glass: the database itself, no API and no key.
    const direct = { HOME: dir, DATABASE_URL: t.url }
    const [bootstrap, both] = await Promise.all([
      run(['user', 'create', '--email', 'root@example.test', '--admin', '--direct-db', '--json'], direct),
      run(['user', 'list', '--direct-db', '--api-url', 'http://127.0.0.1:9'], direct),
    ])
    expect(bootstrap.exitCode, bootstrap.stderr).toBe(0)
    const root = json<{ id: string }>(bootstrap)
    expect(root).toMatchObject({ email: 'root@example.test', is_admin: true })
    const demoted = await run(['user', 'revoke-admin', 'root@example.test', '--yes', '--direct-db', '--json'], direct)
    expect(demoted.exitCode, demoted.stderr).toBe(0)
    expect(json(demoted)).toMatchObject({ id: root.id, is_admin: false, changed: true })
    expect(both.exitCode).toBe(2)
    expect(both.stderr).toMatch(/--api-url.*--direct-db|--direct-db.*--api-url/)
  })

  it('node provision|migrate|terminate with an admin key; refused without admin; another user\'s node is 404; bad input writes nothing', { timeout: 120_000 }, async () => {
    const provisioning = await insertTestNode(t.db)
    const healthy = await insertTestNode(t.db)
    await setNodeState(t.db, healthy.id, 'healthy')
    const runsOf = (nodeId: string) => t.db('workflow_runs').where('workflow_key', 'like', `${nodeId}%`).pluck('workflow_name')

    const provision = await run(['node', 'provision', provisioning.id.slice(0, 23), '--json'])
    expect(provision.exitCode, provision.stderr).toBe(0)
    expect(json(provision)).toMatchObject({ node_id: provisioning.id, workflow: 'provision', created: true, status: 'pending' })
    const again = await run(['node', 'provision', provisioning.id])
    expect(again.stdout).toContain(`already started: provision of node ${provisioning.id} (run ${json<{ run_id: string }>(provision).run_id}, pending)`)

    const [emptyReason, longReason, malformed, unknown, refused, othersNode] = await Promise.all([
      run(['node', 'migrate', healthy.id, '--reason', '']),
      run(['node', 'migrate', healthy.id, '--reason', 'x'.repeat(600)]),
      run(['node', 'provision', 'nope']),
      run(['node', 'migrate', '0190f5c2-0000-7000-8000-000000000000']),
      run(['node', 'provision', provisioning.id], userEnv),
      run(['node', 'terminate', healthy.id.slice(0, 23), '--yes'], userEnv),
    ])
    expect(emptyReason.exitCode).toBe(2)
    expect(oneLineError(emptyReason)).toContain('body.reason: must not be empty')
    expect(longReason.exitCode).toBe(2)
    expect(oneLineError(longReason)).toContain('body.reason: at most 500 characters')
    expect(malformed.exitCode).toBe(2)
    expect(oneLineError(malformed)).toContain('params.id: must be a node id (UUID)')
    expect(unknown.exitCode).toBe(3)
    expect(refused.exitCode).toBe(77)
    expect(oneLineError(refused)).toContain('missing scope')
    expect(othersNode.exitCode).toBe(3)
    expect(oneLineError(othersNode)).toContain(`no node whose id starts with ${healthy.id.slice(0, 23)} among the nodes you can see`)
    expect(await runsOf(healthy.id)).toEqual([])
    expect((await t.db('nodes').where({ id: healthy.id }).first('last_migration_triggered_at')).last_migration_triggered_at).toBeNull()

    const migrate = await run(['node', 'migrate', healthy.id, '--reason', 'host lost its disk', '--json'])
    expect(migrate.exitCode, migrate.stderr).toBe(0)
    expect(json(migrate)).toMatchObject({ node_id: healthy.id, workflow: 'migrate', created: true })
    const migrateAgain = await run(['node', 'migrate', healthy.id, '--force', '--json'])
    expect(json(migrateAgain)).toMatchObject({ run_id: json<{ run_id: string }>(migrate).run_id, created: false })

    // The paid subscription's live node: refused alone (4), asked about with --end-subscription
    // (refused without a terminal and without --yes, naming it), ended with --yes.
    const other = await insertTestNode(t.db)
    await setNodeState(t.db, other.id, 'healthy')
    const [alone, unconfirmed] = await Promise.all([
      run(['node', 'terminate', other.id, '--yes']),
      run(['node', 'terminate', other.id.slice(0, 23), '--end-subscription']),
    ])
    expect(alone.exitCode).toBe(4)
    expect(oneLineError(alone)).toContain(`node ${other.id} is the node of subscription ${other.subscription_id}, which is active`)
    expect(unconfirmed.exitCode).toBe(2)
    expect(unconfirmed.stderr).toContain(`Error: refusing to terminate node ${other.id} (devnet full, healthy; subscription ${other.subscription_id} active) without --yes`)
    expect(await runsOf(other.id)).toEqual([])
    expect((await t.db('subscriptions').where({ id: other.subscription_id }).first('status')).status).toBe('active')

    const ended = await run(['node', 'terminate', other.id, '--reason', 'abuse report 1234', '--end-subscription', '--yes', '--json'])
    expect(ended.exitCode, ended.stderr).toBe(0)
    expect(json(ended)).toMatchObject({ node_id: other.id, workflow: 'terminate', created: true, subscription_id: other.subscription_id, subscription_status: 'terminated', subscription_ended: true, other_nodes: [] })
    const sub = (await t.db('subscriptions').where({ id: other.subscription_id }).first('status', 'user_id')) as { status: string; user_id: string }
    expect(sub.status).toBe('terminated')
    expect(await t.db('notifications').where({ user_id: sub.user_id }).pluck('kind')).toEqual(['subscription_terminated'])
    // Started already: nothing to ask, the run is answered.
    const terminateAgain = await run(['node', 'terminate', other.id, '--json'])
    expect(json(terminateAgain)).toMatchObject({ created: false, subscription_ended: false, subscription_status: 'terminated' })

    // Break-glass on the database.
    const spare = await insertTestNode(t.db)
    const direct = await run(['node', 'provision', spare.id.slice(0, 23), '--direct-db', '--json'], { HOME: dir, DATABASE_URL: t.url })
    expect(direct.exitCode, direct.stderr).toBe(0)
    expect(json(direct)).toMatchObject({ node_id: spare.id, workflow: 'provision', created: true })
  })

  it('workflow list|show with an admin key, by id prefix; refused without admin; unknown is 3; bad filters are 2', { timeout: 120_000 }, async () => {
    const node = await insertTestNode(t.db)
    const provision = { run_id: (await requestProvision(t.db, node.id)).run.id }

    const [list, filtered, show, unknown, refused, badStatus] = await Promise.all([
      run(['workflow', 'list', '--json']),
      run(['workflow', 'list', '--name', 'provision', '--status', 'pending', '--limit', '1', '--json']),
      run(['workflow', 'show', provision.run_id.slice(0, 23), '--json']),
      run(['workflow', 'show', '0190f5c2-0000-7000-8000-000000000000']),
      run(['workflow', 'list'], userEnv),
      run(['workflow', 'list', '--status', 'nope']),
    ])
    expect(list.exitCode, list.stderr).toBe(0)
    const runs = json<{ runs: { id: string; workflow: string; key: string; status: string }[] }>(list).runs
    expect(runs[0]).toMatchObject({ id: provision.run_id, workflow: 'provision', key: node.id, status: 'pending' })
    expect(json<{ runs: unknown[] }>(filtered).runs).toEqual([runs[0]])
    expect(show.exitCode, show.stderr).toBe(0)
    expect(json(show)).toMatchObject({ id: provision.run_id, workflow: 'provision', key: node.id, input: { nodeId: node.id }, steps: [] })
    expect(unknown.exitCode).toBe(3)
    expect(oneLineError(unknown)).toBe('Error: no workflow run 0190f5c2-0000-7000-8000-000000000000')
    expect(refused.exitCode).toBe(77)
    expect(badStatus.exitCode).toBe(2)
    expect(oneLineError(badStatus)).toContain('--status')

    const direct = await run(['workflow', 'show', provision.run_id, '--direct-db', '--json'], { HOME: dir, DATABASE_URL: t.url })
    expect(direct.exitCode, direct.stderr).toBe(0)
    expect(json(direct)).toEqual(json(show))
  })
})
