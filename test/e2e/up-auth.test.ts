import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile } from '../helpers/cli.js'

const KEY_SHAPE = /^np_[A-Za-z0-9_-]{43}$/

describe('nodeplane up: auth-server, local operator and its admin key', () => {
  const dirs: string[] = []
  const children: Array<ReturnType<typeof spawnNodeplane>> = []
  afterEach(async () => {
    for (const child of children.splice(0)) {
      child.kill('SIGKILL')
      await child
    }
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('writes a 0600 admin key and stack.json, which commands run in the same directory use; a restart replaces the key', { timeout: 90_000 }, async () => {
    const dir = fs.realpathSync(tempDir())
    dirs.push(dir)
    // HOME and XDG_CONFIG_HOME point at empty dirs: no stored login of whoever runs the tests.
    const env = { ...(await upPorts()), HOME: path.join(dir, 'home'), XDG_CONFIG_HOME: path.join(dir, 'config') }
    const dataDir = path.join(dir, '.nodeplane')
    const stackFile = path.join(dataDir, 'stack.json')
    const keyFile = path.join(dataDir, 'admin-api-key')

    const start = async () => {
      const child = spawnNodeplane(['up'], { cwd: dir, env })
      children.push(child)
      const stack = await waitForFile<StackFile>(stackFile, 'stack.json')
      return { child, stack }
    }
    const stop = async (child: ReturnType<typeof spawnNodeplane>) => {
      child.kill('SIGTERM')
      const result = await child
      children.splice(children.indexOf(child), 1)
      return result
    }

    const first = await start()
    expect(first.stack).toMatchObject({
      daemons: ['orchestrator', 'health-evaluator', 'agent-gateway', 'payment-service', 'auth-server', 'rpc-gateway', 'api-server'],
      api_url: `http://127.0.0.1:${env.API_SERVER_PORT}`,
      auth_url: `http://127.0.0.1:${env.AUTH_SERVER_PORT}`,
      admin_api_key_file: keyFile,
    })
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600)
    const firstKey = fs.readFileSync(keyFile, 'utf8').trim()
    expect(firstKey).toMatch(KEY_SHAPE)
    expect((await fetch(`${first.stack.auth_url}/health`)).status).toBe(200)

    // Another terminal, same directory, nothing configured: the stack's URL and admin key.
    const implicit = await nodeplane(['whoami', '--json'], { cwd: dir, env })
    expect(implicit.exitCode).toBe(0)
    const me = JSON.parse(implicit.stdout)
    expect(me).toMatchObject({ email: 'operator@localhost', is_admin: true, auth_method: 'api_key', api_url: first.stack.api_url, credentials_from: 'stack' })
    expect(me.scopes).toEqual(expect.arrayContaining(['*', 'admin']))
    // The documented explicit form works from anywhere.
    const explicit = await nodeplane(['whoami', '--json'], { env: { ...env, NODEPLANE_API_KEY: firstKey, NODEPLANE_API_URL: first.stack.api_url } })
    expect(JSON.parse(explicit.stdout)).toMatchObject({ user_id: me.user_id, api_key_id: me.api_key_id, credentials_from: 'env' })

    const firstRun = await stop(first.child)
    expect(firstRun.exitCode).toBe(143)
    expect(fs.existsSync(stackFile)).toBe(false)

    // A restart: the same operator, a new key, the previous one revoked.
    const second = await start()
    const secondKey = fs.readFileSync(keyFile, 'utf8').trim()
    expect(secondKey).toMatch(KEY_SHAPE)
    expect(secondKey).not.toBe(firstKey)
    const old = await nodeplane(['whoami'], { cwd: dir, env: { ...env, NODEPLANE_API_KEY: firstKey } })
    expect(old.exitCode).toBe(77)
    expect(old.stderr.split('\n')[0]).toMatch(/^Error: not authenticated by http:\/\/127\.0\.0\.1:\d+: .*revoked/)
    const users = await nodeplane(['user', 'list', '--json'], { cwd: dir, env })
    expect(JSON.parse(users.stdout).users.filter((u: { email: string }) => u.email === 'operator@localhost')).toHaveLength(1)

    const secondRun = await stop(second.child)
    expect(secondRun.exitCode).toBe(143)
    for (const output of [firstRun.all, secondRun.all, implicit.stdout, explicit.stdout]) {
      expect(String(output)).not.toContain(firstKey)
      expect(String(output)).not.toContain(secondKey)
    }
  })
})
