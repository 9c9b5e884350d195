import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { nodeplane, spawnNodeplane, jsonLogLines } from '../helpers/cli.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'

describe('nodeplane daemon api-server (separate process, Postgres + NATS)', () => {
  let nats: NatsServer
  let database: TestDatabase

  beforeAll(async () => {
    nats = await startNats()
    database = await createTestDatabase('postgres')
  })
  afterAll(async () => {
    await database?.destroy()
    await nats?.destroy()
  })

  it('refuses to start without NATS_URL, pointing at nodeplane up', async () => {
    const result = await nodeplane(['daemon', 'api-server'], { env: { DATABASE_URL: database.url } })
    expect(result.exitCode).toBe(78)
    expect(result.stderr).toMatch(/NATS_URL: required when a daemon runs as its own process/)
    expect(result.stderr).toContain('nodeplane up')
  })

  it('refuses to run on a database with pending migrations', async () => {
    const empty = await createTestDatabase('postgres', { migrated: false })
    try {
      const result = await nodeplane(['daemon', 'api-server'], { env: { DATABASE_URL: empty.url, NATS_URL: nats.url, API_SERVER_PORT: String(await freePort()) } })
      expect(result.exitCode).toBe(69)
      expect(result.stderr).toContain('pending migration')
      expect(result.stderr).toContain('nodeplane db migrate')
    } finally {
      await empty.destroy()
    }
  })

  it('serves /readyz with per-component health that follows NATS going down (degraded, still ready) and coming back, and stops with 143', async () => {
    const port = await freePort()
    const child = spawnNodeplane(['daemon', 'api-server'], {
      env: { DATABASE_URL: database.url, NATS_URL: nats.url, API_SERVER_PORT: String(port) },
    })
    try {
      const url = `http://127.0.0.1:${port}`
      await waitFor(async () => (await fetch(`${url}/health`)).ok, 'api-server to listen')
      const ready = await fetch(`${url}/readyz`)
      expect(ready.status).toBe(200)
      expect(await ready.json()).toMatchObject({ components: { database: { status: 'up' }, bus: { status: 'up' } } })

      // Without NATS the server stays ready (its events wait in the outbox): 200, degraded.
      await nats.stop()
      const down = await waitFor(async () => {
        const res = await fetch(`${url}/readyz`)
        const body = (await res.json()) as { status: string; components: Record<string, { status: string }> }
        return body.status === 'degraded' ? { http: res.status, ...body } : undefined
      }, '/readyz to report the bus down')
      expect(down.http).toBe(200)
      expect(down.components.bus?.status).toBe('down')
      expect(down.components.database?.status).toBe('up')

      await nats.start()
      await waitFor(async () => ((await (await fetch(`${url}/readyz`)).json()) as { status: string }).status === 'ready', '/readyz to recover')
    } finally {
      child.kill('SIGTERM')
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    const lines = jsonLogLines(result.all)
    expect(lines.length).toBeGreaterThan(0)
    expect(lines.every((l) => l.daemon === 'api-server')).toBe(true)
    expect(lines.some((l) => l.msg === 'ready')).toBe(true)
  })
})
