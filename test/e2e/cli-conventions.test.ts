/**
 * Issue 20, items 1, 2, 3 and 7, through the built binary: usage errors that name the flag and
 * what it wants (no stack: oclif's parser answers), the subject as the first argument with unique
 * id prefixes resolved among what the key can see, destructive commands that ask on a terminal
 * (a pseudo-terminal from util-linux `script`) and refuse without one unless --yes, and the
 * conventions (-v, version, -h, ls, --columns, "did you mean", completion). The API parts run
 * against an api-server (the daemon's start function, in this process) on both databases.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startApiServer } from '../../daemons/api-server.js'
import { createApiKey } from '../../src/auth/api-keys.js'
import { createLocalBus } from '../../src/events/local-bus.js'
import { createLogger } from '../../src/log.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'
import { onTerminal as onPty, plain } from '../helpers/pty.js'

interface ErrorOutput {
  error: { name: string; message: string; details?: string; exit_code: number }
}
const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T

/** The binary under a pseudo-terminal, `answer` typed at it; output without escape sequences. */
async function onTerminal(args: string[], answer: string, env: Record<string, string>, cwd: string): Promise<CliResult> {
  const r = await onPty(args, { env, cwd, input: answer })
  return { ...r, stdout: plain(r.stdout), stderr: plain(r.stderr) }
}

describe('usage errors and conventions (no stack)', () => {
  const dir = tempDir()
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
  const run = (args: string[]) => nodeplane(args, { cwd: dir, env: { HOME: dir } })

  it('names the flag or argument and what it wants, in text and --json, with exit 2', { timeout: 60_000 }, async () => {
    const [limit, state, missingFlag, missingSubject, twice] = await Promise.all([
      run(['node', 'list', '--limit', 'abc', '--json']),
      run(['node', 'list', '--state', 'nope']),
      run(['user', 'create']),
      run(['incident', 'resolve', '--json']),
      run(['node', 'show', 'abcd1234', '--id', 'ffff0000']),
    ])
    expect(limit.exitCode).toBe(2)
    expect(json<ErrorOutput>(limit).error).toEqual({ name: 'UsageError', message: '--limit: Expected an integer but received: abc', details: 'see `nodeplane node list --help`', exit_code: 2 })
    expect(state.exitCode).toBe(2)
    expect(state.stderr).toMatch(/^Error: Expected --state=nope to be one of: provisioning, /)
    expect(missingFlag.exitCode).toBe(2)
    expect(missingFlag.stderr).toMatch(/^Error: missing required flag --email\n  see `nodeplane user create --help`/)
    expect(missingSubject.exitCode).toBe(2)
    expect(json<ErrorOutput>(missingSubject).error).toMatchObject({ message: 'missing the incident: give it as the first argument (or --id)', details: 'e.g. `nodeplane incident resolve ID`' })
    expect(twice.exitCode).toBe(2)
    expect(twice.stderr).toMatch(/^Error: the node is given twice and the two differ: argument "abcd1234" and --id "ffff0000"\n/)
  })

  it('-v, version, -h, ls, completion, and "did you mean" on a terminal', { timeout: 60_000 }, async () => {
    const [short, version, help, completion, typo] = await Promise.all([
      run(['-v']),
      run(['version', '--json']),
      run(['node', 'ls', '-h']),
      run(['autocomplete', 'script', 'bash']),
      onTerminal(['node', 'lst'], 'n\n', { HOME: dir }, dir),
    ])
    expect(short.stdout).toMatch(/^nodeplane\/\d+\.\d+\.\d+ linux-x64 node-v20/)
    expect(json<{ version: string }>(version).version).toMatch(/^\d+\.\d+\.\d+$/)
    expect(help.exitCode).toBe(0)
    expect(help.stdout).toContain('$ nodeplane node ls')
    expect(help.stdout).toContain('--columns')
    expect(completion.exitCode, completion.stderr).toBe(0)
    expect(completion.stdout).toContain('autocomplete/bash_setup')
    expect(typo.stdout).toContain('node lst is not a nodeplane command')
    expect(typo.stdout).toContain('Did you mean node list?')
  })
})

describe.each(DIALECTS)('ids, prefixes and confirmations on %s', (dialect) => {
  let t: TestDatabase
  let stop: () => Promise<void>
  let env: Record<string, string>
  const dir = tempDir()
  const ALICE_1 = 'aaaa0001-0000-4000-8000-000000000001'
  const ALICE_2 = 'aaaa0002-0000-4000-8000-000000000002'
  const BOB_1 = 'bbbb0001-0000-4000-8000-000000000001'
  let spare: { id: string }
  const run = (args: string[]) => nodeplane(args, { cwd: dir, env })

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    const bus = createLocalBus()
    const started = await startApiServer(
      { API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1', HTTP_BODY_LIMIT_BYTES: 1024 * 1024, NODEPLANE_DATA_DIR: path.join(dir, 'data') },
      { db: t.db, bus, logger: createLogger({ level: 'silent' }) },
    )
    stop = async () => (await started.stop(), await bus.close())
    const node = async (userId: string, id: string) => {
      const n = await insertNode(t.db, { subscription_id: await insertSubscription(t.db, userId), chain_profile_id: 'devnet', node_type: 'full' })
      await t.db('nodes').where({ id: n.id }).update({ id })
    }
    const alice = await insertUser(t.db)
    const bob = await insertUser(t.db)
    await node(alice, ALICE_1)
    await node(alice, ALICE_2)
    await node(bob, BOB_1)
    const issued = await t.db.transaction((trx) => createApiKey(trx, { userId: alice, name: 'alice', scopes: ['nodes:read', 'api-keys:manage'], expiresAt: null }, new Date()))
    spare = (await t.db.transaction((trx) => createApiKey(trx, { userId: alice, name: 'spare', scopes: ['nodes:read'], expiresAt: null }, new Date()))).apiKey
    env = { NODEPLANE_API_URL: started.url, NODEPLANE_API_KEY: issued.key, HOME: dir }
  })
  afterAll(async () => {
    await stop?.()
    await t?.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('takes the id as the first argument or a unique prefix of it; ambiguous is a usage error, another user\'s is not found', { timeout: 60_000 }, async () => {
    const [byPrefix, byFlag, ambiguous, bobs, columns] = await Promise.all([
      run(['node', 'show', 'aaaa0001', '--json']),
      run(['node', 'show', '--id', ALICE_2, '--json']),
      run(['node', 'show', 'aaaa', '--json']),
      run(['node', 'show', 'bbbb0001']),
      run(['node', 'ls', '--columns', 'id,display-state']),
    ])
    expect(byPrefix.exitCode, byPrefix.stderr).toBe(0)
    expect(json<{ id: string }>(byPrefix).id).toBe(ALICE_1)
    expect(json<{ id: string }>(byFlag).id).toBe(ALICE_2)
    expect(ambiguous.exitCode).toBe(2)
    const error = json<ErrorOutput>(ambiguous).error
    expect(error.message).toBe('the id prefix aaaa is ambiguous: it matches 2 nodes')
    expect(error.details).toContain(ALICE_1)
    expect(error.details).toContain(ALICE_2)
    expect(bobs.exitCode).toBe(3)
    expect(bobs.stderr).toMatch(/^Error: no node whose id starts with bbbb0001 among the nodes you can see\n/)
    expect(columns.stdout.split('\n')[0]).toMatch(/^ID +DISPLAY STATE$/)
    expect(columns.stdout).toContain(ALICE_1)
  })

  it('a destructive command refuses without a terminal unless --yes, and asks naming the object on one', { timeout: 60_000 }, async () => {
    const revokedAt = async () => (await t.db('api_keys').where({ id: spare.id }).first('revoked_at')).revoked_at as unknown
    // Ids are UUIDv7: the first 12 hex digits are the creation time, shared by keys made in the
    // same millisecond, so a prefix that is unique reaches into the random part.
    const prefix = spare.id.slice(0, 23)
    const refused = await run(['api-key', 'revoke', prefix])
    expect(refused.exitCode).toBe(2)
    expect(refused.stderr).toMatch(new RegExp(`^Error: refusing to revoke API key "spare" \\(\\S+…, ${spare.id}\\) without --yes: there is no terminal to ask on\\n  add --yes \\(-y\\) to confirm$`))
    expect(await revokedAt()).toBeNull()

    const no = await onTerminal(['api-key', 'revoke', prefix], 'n\n', env, dir)
    expect(no.exitCode).toBe(1)
    expect(no.stdout).toContain(`Revoke API key "spare"`)
    expect(no.stdout).toContain('[y/N]')
    expect(no.stdout).toContain('cancelled; nothing was changed')
    expect(await revokedAt()).toBeNull()

    const yes = await onTerminal(['api-key', 'revoke', prefix], 'y\n', env, dir)
    expect(yes.exitCode, yes.stdout).toBe(0)
    expect(await revokedAt()).not.toBeNull()
  })
})
