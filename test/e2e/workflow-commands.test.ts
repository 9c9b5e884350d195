import path from 'node:path'
import fs from 'node:fs'
import { afterEach, describe, expect, it } from 'vitest'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { ensureDevCertificates } from '../../src/agent-gateway/tls.js'
import { createLocalMasterKey } from '../../src/secrets/master-key.js'
import { migrateLatest } from '../../src/db/migrate.js'
import { createWorkflowRegistry, createWorkflowWorker, startWorkflow } from '../../src/workflows/index.js'
import { silentLogger } from '../integration/workflows/harness.js'
import { nodeplane, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { startNats, type NatsServer } from '../helpers/nats.js'

describe('workflow list|show --direct-db and the orchestrator daemon (SQLite file)', () => {
  let db: Db | undefined
  let dir: string | undefined
  let nats: NatsServer | undefined
  afterEach(async () => {
    await nats?.destroy()
    nats = undefined
    await db?.destroy()
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
    db = undefined
  })

  it('lists and shows runs with their status, current step, attempts and last error', { timeout: 60_000 }, async () => {
    dir = tempDir()
    const url = `sqlite://${path.join(dir, 'control-plane.db')}`
    db = createDatabase(url)
    await migrateLatest(db, 'control-plane')
    const registry = createWorkflowRegistry().register('provision', async (ctx) => {
      await ctx.step('create-host', async () => 'host-1')
      await ctx.step('configure', async () => {
        throw new Error('agent unreachable')
      }, { retry: { maxAttempts: 1 } })
    })
    const failed = await startWorkflow(db, 'provision', { node: 'n1' }, { key: 'n1' })
    await createWorkflowWorker({ db, registry, logger: silentLogger }).tick()
    const pending = await startWorkflow(db, 'migrate', { node: 'n2' }, { key: 'n2' })
    const env = { DATABASE_URL: url }

    const list = await nodeplane(['workflow', 'list', '--direct-db', '--json'], { env })
    expect(list.exitCode).toBe(0)
    const runs = JSON.parse(list.stdout).runs
    expect(runs.map((r: { id: string }) => r.id)).toEqual([pending.run.id, failed.run.id])
    expect(runs[1]).toMatchObject({ workflow: 'provision', key: 'n1', status: 'failed', current_step: 'configure#0', attempts: 1, error: expect.stringContaining('agent unreachable') })

    const onlyFailed = await nodeplane(['workflow', 'list', '--status', 'failed', '--name', 'provision', '--direct-db', '--json'], { env })
    expect(JSON.parse(onlyFailed.stdout).runs).toHaveLength(1)

    const show = await nodeplane(['workflow', 'show', '--id', failed.run.id, '--direct-db', '--json'], { env })
    expect(show.exitCode).toBe(0)
    expect(JSON.parse(show.stdout)).toMatchObject({
      id: failed.run.id,
      status: 'failed',
      input: { node: 'n1' },
      steps: [
        { step: 'create-host#0', status: 'completed', attempt: 1, error: null },
        { step: 'configure#0', status: 'failed', attempt: 1, error: 'agent unreachable' },
      ],
    })
    const human = await nodeplane(['workflow', 'show', '--id', failed.run.id, '--direct-db'], { env })
    expect(human.stdout).toContain('last error:')
    expect(human.stdout).toMatch(/configure#0\s+failed\s+1/)

    const missing = await nodeplane(['workflow', 'show', '--id', '00000000-0000-7000-8000-000000000000', '--direct-db'], { env })
    expect(missing.exitCode).toBe(3)
    expect(missing.stderr).toMatch(/^Error: no workflow run/)
  })

  it('runs the orchestrator daemon until SIGTERM, then exits 143', { timeout: 60_000 }, async () => {
    dir = tempDir()
    const url = `sqlite://${path.join(dir, 'control-plane.db')}`
    db = createDatabase(url)
    await migrateLatest(db, 'control-plane')
    // It consumes payment events: without NATS it refuses to start (exit 78) and says why.
    const noNats = await nodeplane(['daemon', 'orchestrator'], { env: { DATABASE_URL: url, NODEPLANE_DATA_DIR: dir } })
    expect(noNats.exitCode).toBe(78)
    expect(noNats.stderr).toMatch(/^Error: invalid configuration: NATS_URL: required when a daemon runs as its own process/)
    nats = await startNats()
    // Without the master key and the gateway's CA the orchestrator refuses to start (exit 78).
    const refused = await nodeplane(['daemon', 'orchestrator'], { env: { DATABASE_URL: url, NODEPLANE_DATA_DIR: dir, NATS_URL: nats.url } })
    expect(refused.exitCode).toBe(78)
    expect(refused.stderr).toContain('nodeplane secrets init')
    await createLocalMasterKey(path.join(dir, 'master.key'))
    const noCa = await nodeplane(['daemon', 'orchestrator'], { env: { DATABASE_URL: url, NODEPLANE_DATA_DIR: dir, NATS_URL: nats.url } })
    expect(noCa.exitCode).toBe(78)
    expect(noCa.stderr).toContain('AGENT_GATEWAY_CA_FILE')
    ensureDevCertificates(path.join(dir, 'agent-ca'))
    const child = spawnNodeplane(['daemon', 'orchestrator'], { env: { DATABASE_URL: url, NODEPLANE_DATA_DIR: dir, NATS_URL: nats.url, LOG_LEVEL: 'info' } })
    let output = ''
    child.all?.on('data', (chunk: Buffer) => (output += chunk.toString()))
    const deadline = Date.now() + 30_000
    while (!output.includes('"msg":"ready"') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    expect(output).toContain('"msg":"ready"')
    child.kill('SIGTERM')
    const result = await child
    expect(result.exitCode).toBe(143)
    expect(result.all).toContain('"msg":"stopped"')
  })
})
