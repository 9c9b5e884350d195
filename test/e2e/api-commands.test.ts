import fs from 'node:fs'
import path from 'node:path'
import { execa } from 'execa'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { BIN, cleanEnv, nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'

/**
 * The commands over the API against one `nodeplane up`: api-key create|list|rotate|revoke|delete
 * with the stack's admin key, login / whoami / logout with a stored key, and the failures a
 * user meets (revoked key, unsafe credentials file, a scope the API refuses).
 */
describe('commands over the API (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let stack: StackFile
  let env: Record<string, string>
  /** Every plaintext key seen, to check none leaks into output that should not carry it. */
  const keys: string[] = []
  const outputs: string[] = []

  const run = async (args: string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<CliResult> => {
    return nodeplane(args, { cwd: options.cwd ?? dir, env: { ...env, ...options.env } })
  }
  const json = <T = Record<string, unknown>>(result: CliResult): T => JSON.parse(result.stdout) as T

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    env = { HOME: path.join(dir, 'home'), XDG_CONFIG_HOME: path.join(dir, 'config') }
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...env, ...(await upPorts()) } })
    stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')
    keys.push(fs.readFileSync(stack.admin_api_key_file, 'utf8').trim())
  })

  afterAll(async () => {
    up.kill('SIGTERM')
    const result = await up
    expect(result.exitCode).toBe(143)
    for (const key of keys) expect(String(result.all)).not.toContain(key)
    for (const output of outputs) for (const key of keys) expect(output).not.toContain(key)
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('creates, lists, rotates, revokes and deletes keys; a revoked key fails with exit 77 and one line', { timeout: 90_000 }, async () => {
    const created = await run(['api-key', 'create', '--name', 'ci', '--scopes', 'nodes:read,api-keys:manage', '--expires-in', '30d', '--json'])
    expect(created.exitCode).toBe(0)
    const ci = json<{ id: string; key: string; scopes: string[]; expires_at: string }>(created)
    expect(ci).toEqual({ id: expect.any(String), key: expect.stringMatching(/^np_/), scopes: ['nodes:read', 'api-keys:manage'], expires_at: expect.any(String) })
    keys.push(ci.key)

    const adminScope = await run(['api-key', 'create', '--name', 'sneaky', '--scopes', 'admin'])
    expect(adminScope.exitCode).toBe(2)
    expect(adminScope.stderr).toContain('admin cannot be given to an API key through the API')

    const listed = await run(['api-key', 'list', '--json'])
    expect(listed.exitCode).toBe(0)
    const items = json<{ api_keys: Array<Record<string, unknown>> }>(listed).api_keys
    expect(items.map((k) => [k.name, k.status])).toEqual([
      ['ci', 'active'],
      ['nodeplane up', 'active'],
    ])
    expect(items.every((k) => !('key' in k))).toBe(true)
    const table = await run(['api-key', 'list', '--limit', '1'])
    expect(table.stdout.split('\n')).toHaveLength(3)
    expect(table.stdout).toMatch(/^ID\s+NAME\s+PREFIX\s+SCOPES\s+STATUS\s+EXPIRES\s+LAST USED\n/)
    outputs.push(listed.stdout, table.stdout)

    // Not a TTY: no prompt, rotation happens at once.
    const rotated = await run(['api-key', 'rotate', '--id', ci.id, '--yes', '--json'])
    expect(rotated.exitCode).toBe(0)
    const next = json<{ id: string; key: string; rotated_from_id: string }>(rotated)
    expect(next).toMatchObject({ rotated_from_id: ci.id, scopes: ['nodes:read', 'api-keys:manage'], expires_at: ci.expires_at })
    keys.push(next.key)
    const withOld = await run(['whoami'], { env: { NODEPLANE_API_KEY: ci.key } })
    expect(withOld.exitCode).toBe(77)
    const withNew = await run(['whoami', '--json'], { env: { NODEPLANE_API_KEY: next.key } })
    expect(json(withNew)).toMatchObject({ api_key_id: next.id, scopes: ['nodes:read', 'api-keys:manage'], credentials_from: 'env' })
    outputs.push(withNew.stdout)

    const revoked = await run(['api-key', 'revoke', '--id', next.id, '--yes', '--json'])
    expect(revoked.exitCode).toBe(0)
    expect(json(revoked)).toMatchObject({ id: next.id, status: 'revoked', revoked_at: expect.any(String) })
    const refused = await run(['whoami'], { env: { NODEPLANE_API_KEY: next.key } })
    expect(refused.exitCode).toBe(77)
    const lines = refused.stderr.trim().split('\n')
    expect(lines[0]).toMatch(/^Error: not authenticated by http:\/\/127\.0\.0\.1:\d+: .*revoked/)
    expect(lines.length).toBeLessThanOrEqual(2)
    expect(refused.stderr).not.toContain(next.key)

    const deleted = await run(['api-key', 'delete', '--id', next.id, '--yes', '--json'])
    expect(json(deleted)).toEqual({ id: next.id, deleted: true })
    const again = await run(['api-key', 'delete', '--id', next.id])
    expect(again.exitCode).toBe(3)
    const after = json<{ api_keys: Array<{ id: string }> }>(await run(['api-key', 'list', '--json'])).api_keys.map((k) => k.id)
    expect(after).not.toContain(next.id)
    expect(after).toContain(ci.id)
  })

  it('login stores a key issued by the operator 0600 and whoami uses it; a 0644 file is refused', { timeout: 90_000 }, async () => {
    // `api-key issue` writes straight into the running stack's database; the key works at once.
    const issued = await run(['api-key', 'issue', '--user', 'operator@localhost', '--name', 'laptop', '--scopes', 'api-keys:manage', '--json'])
    expect(issued.exitCode).toBe(0)
    const laptop = json<{ id: string; key: string }>(issued)
    keys.push(laptop.key)

    fs.mkdirSync(env.HOME as string, { recursive: true })
    const login = await execa('node', [BIN, 'login', '--api-url', stack.api_url, '--with-key-stdin', '--json'], {
      cwd: env.HOME,
      env: cleanEnv(env),
      extendEnv: false,
      input: `${laptop.key}\n`,
      reject: false,
    })
    expect(login.exitCode).toBe(0)
    const file = path.join(env.XDG_CONFIG_HOME as string, 'nodeplane', 'credentials.json')
    expect(JSON.parse(String(login.stdout))).toMatchObject({ email: 'operator@localhost', api_url: stack.api_url, credentials_file: file })
    outputs.push(String(login.stdout), String(login.stderr))
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700)

    // Away from the stack's directory: only the stored login can say where and who.
    const whoami = await run(['whoami', '--json'], { cwd: env.HOME })
    expect(whoami.exitCode).toBe(0)
    expect(json(whoami)).toMatchObject({ api_key_id: laptop.id, api_url: stack.api_url, credentials_from: 'login' })
    outputs.push(whoami.stdout)

    fs.chmodSync(file, 0o644)
    const unsafe = await run(['whoami'], { cwd: env.HOME })
    expect(unsafe.exitCode).toBe(1)
    expect(unsafe.stderr).toContain(`refusing to use ${file}: its mode is 0644`)
    fs.chmodSync(file, 0o600)

    const logout = await run(['logout', '--json'], { cwd: env.HOME })
    expect(json(logout)).toEqual({ credentials_file: file, removed: true, context: 'default' })
    const anonymous = await run(['whoami'], { cwd: env.HOME })
    expect(anonymous.exitCode).toBe(78)
  })
  it('an operator disables and enables a user and revokes their key over the API: effective on the next request', { timeout: 90_000 }, async () => {
    expect((await run(['user', 'create', '--email', 'mallory@example.test'])).exitCode).toBe(0)
    const issued = await run(['api-key', 'issue', '--user', 'mallory@example.test', '--name', 'm', '--scopes', 'nodes:read', '--json'])
    const mallory = json<{ id: string; key: string }>(issued)
    keys.push(mallory.key)
    const asMallory = { env: { NODEPLANE_API_KEY: mallory.key } }

    const disabled = await run(['user', 'disable', '--user', 'mallory@example.test', '--yes', '--json'])
    expect(disabled.exitCode).toBe(0)
    expect(json(disabled)).toMatchObject({ email: 'mallory@example.test', disabled_at: expect.any(String), changed: true })
    const refused = await run(['whoami'], asMallory)
    expect(refused.exitCode).toBe(77)
    expect(refused.stderr).toContain('the user of this API key is disabled')

    const enabled = await run(['user', 'enable', '--user', 'mallory@example.test'])
    expect(enabled.stdout).toContain('mallory@example.test is enabled')
    expect((await run(['whoami'], asMallory)).exitCode).toBe(0)

    const revoked = await run(['user', 'revoke-key', '--id', mallory.id, '--yes', '--json'])
    expect(json(revoked)).toMatchObject({ id: mallory.id, revoked_at: expect.any(String) })
    expect((await run(['whoami'], asMallory)).exitCode).toBe(77)

    // An unknown user: exit 3, one line; the caller's own key lacks admin: exit 77.
    const unknown = await run(['user', 'disable', '--user', 'nobody@example.test', '--yes'])
    expect(unknown.exitCode).toBe(3)
    const notAdmin = await run(['user', 'enable', '--user', 'mallory@example.test'], asMallory)
    expect(notAdmin.exitCode).toBe(77)
  })
})
