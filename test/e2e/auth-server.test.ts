import fs from 'node:fs'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { nodeplane, spawnNodeplane, tempDir, jsonLogLines } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { freePort, waitFor } from '../helpers/ports.js'

const WEBHOOK_SECRET = `whsec_${Buffer.from('e2e webhook signing secret').toString('base64')}`

describe('nodeplane daemon auth-server (separate process, SQLite, no NATS)', () => {
  let database: TestDatabase
  const dirs: string[] = []
  beforeAll(async () => {
    database = await createTestDatabase('sqlite')
  })
  afterAll(async () => {
    await database?.destroy()
  })
  afterEach(() => {
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })
  const dataDir = () => {
    const dir = tempDir()
    dirs.push(dir)
    return dir
  }

  it('answers /health and the key set without NATS_URL, creates its key 0600, and stops on SIGTERM with 143', async () => {
    const port = await freePort()
    const data = dataDir()
    const child = spawnNodeplane(['daemon', 'auth-server'], {
      env: { DATABASE_URL: database.url, NODEPLANE_DATA_DIR: data, AUTH_SERVER_PORT: String(port), AUTH_PROVIDER: 'both', AUTH_IDP_WEBHOOK_SIGNING_SECRET: WEBHOOK_SECRET },
    })
    try {
      const url = `http://127.0.0.1:${port}`
      await waitFor(async () => (await fetch(`${url}/health`)).ok, 'auth-server to listen')
      expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'healthy' })
      const jwks = (await (await fetch(`${url}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }
      expect(jwks.keys).toHaveLength(1)
      expect(fs.statSync(path.join(data, 'auth-signing-key.pem')).mode & 0o777).toBe(0o600)
      const nonce = await fetch(`${url}/auth/nonce?address=0x52908400098527886E0F7030069857D2E4169EE7`)
      expect(nonce.status).toBe(200)
      // The webhook is mounted: an unsigned delivery is refused, not unknown.
      expect((await fetch(`${url}/webhooks/idp`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })).status).toBe(401)
    } finally {
      child.kill('SIGTERM')
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    const lines = jsonLogLines(result.all)
    expect(lines.every((l) => l.daemon === 'auth-server')).toBe(true)
    expect(lines.some((l) => l.msg === 'ready')).toBe(true)
    expect(lines.some((l) => l.msg === 'stopped')).toBe(true)
    expect(lines.some((l) => JSON.stringify(l).includes(WEBHOOK_SECRET))).toBe(false)
  })

  it('refuses to start in a mode that serves the webhook without its signing secret (exit 78)', async () => {
    for (const mode of ['idp', 'both']) {
      const result = await nodeplane(['daemon', 'auth-server'], {
        env: { DATABASE_URL: database.url, NODEPLANE_DATA_DIR: dataDir(), AUTH_SERVER_PORT: String(await freePort()), AUTH_PROVIDER: mode },
      })
      expect(result.exitCode).toBe(78)
      expect(result.stderr).toContain(`AUTH_IDP_WEBHOOK_SIGNING_SECRET: required with AUTH_PROVIDER=${mode}`)
    }
  })

  it('refuses to start with a signing key others can read (exit 78, naming the file)', async () => {
    const data = dataDir()
    const keyFile = path.join(data, 'auth-signing-key.pem')
    fs.writeFileSync(keyFile, 'whatever', { mode: 0o644 })
    fs.chmodSync(keyFile, 0o644)
    const result = await nodeplane(['daemon', 'auth-server'], {
      env: { DATABASE_URL: database.url, NODEPLANE_DATA_DIR: data, AUTH_SERVER_PORT: String(await freePort()), AUTH_PROVIDER: 'siwe' },
    })
    expect(result.exitCode).toBe(78)
    expect(result.stderr).toContain(keyFile)
    expect(result.stderr).toContain('chmod 600')
  })

  it('refuses to run on a database with pending migrations (exit 69)', async () => {
    const empty = await createTestDatabase('sqlite', { migrated: false })
    try {
      const result = await nodeplane(['daemon', 'auth-server'], {
        env: { DATABASE_URL: empty.url, NODEPLANE_DATA_DIR: dataDir(), AUTH_SERVER_PORT: String(await freePort()), AUTH_PROVIDER: 'siwe' },
      })
      expect(result.exitCode).toBe(69)
      expect(result.stderr).toContain('nodeplane db migrate')
    } finally {
      await empty.destroy()
    }
  })
})
