import fs from 'node:fs'
import { afterEach, describe, expect, it } from 'vitest'
import { findNode } from '../../src/nodes/node-store.js'
import { LocalInfrastructureProvider } from '../../src/provisioning/infrastructure/local.js'
import { requestProvision } from '../../src/provisioning/index.js'
import { getRun, listSteps } from '../../src/workflows/index.js'
import { jsonLogLines, spawnNodeplane } from '../helpers/cli.js'
import { orchestratorDaemonEnv } from '../helpers/orchestrator-daemon.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { insertTestNode } from '../helpers/fixtures.js'
import { waitFor } from '../helpers/ports.js'
import { quiet, startGateway, type RunningGateway } from '../integration/agent-gateway/harness.js'

/**
 * `nodeplane daemon orchestrator` processes provisioning a node on the local provider; the first
 * is killed with SIGKILL mid-provision, the second takes the run over after the lease expires.
 */
describe.each(DIALECTS)('orchestrator killed mid-provision on %s', (dialect) => {
  let database: TestDatabase | undefined
  let gateway: RunningGateway | undefined
  let hostsDir: string | undefined
  let nats: NatsServer | undefined

  afterEach(async () => {
    await nats?.destroy()
    nats = undefined
    if (hostsDir) {
      const provider = new LocalInfrastructureProvider({ root: hostsDir, logger: quiet })
      for (const host of fs.readdirSync(hostsDir)) await provider.destroyHost(host)
    }
    await gateway?.stop()
    await database?.destroy()
    database = undefined
    gateway = undefined
  })

  it('resumes on another orchestrator and never creates a second host for the node', { timeout: 120_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    gateway = await startGateway(db, { heartbeatFlushIntervalMs: 50, commandPollIntervalMs: 50 })
    nats = await startNats()
    const daemon = await orchestratorDaemonEnv(database.url, nats.url, gateway)
    hostsDir = daemon.hostsDir
    const env = daemon.env

    const node = await insertTestNode(db)
    const { run } = await requestProvision(db, node.id)
    const doomed = spawnNodeplane(['daemon', 'orchestrator'], { env })
    // Killed once the host exists but before the run finished: inside or right after the step.
    await waitFor(async () => fs.existsSync(hostsDir!) && fs.readdirSync(hostsDir!).length > 0, 'the first host', 60_000, 20)
    doomed.kill('SIGKILL')
    const killed = await doomed
    expect(killed.signal).toBe('SIGKILL')
    const doomedOwner = jsonLogLines(killed.stdout).find((l) => l.msg === 'workflow worker started')?.owner
    expect(doomedOwner).toEqual(expect.any(String))
    expect((await getRun(db, run.id))?.status).not.toBe('completed')

    const survivor = spawnNodeplane(['daemon', 'orchestrator'], { env })
    try {
      const done = await waitFor(async () => {
        const r = await getRun(db, run.id)
        return r && (r.status === 'completed' || r.status === 'failed') ? r : undefined
      }, 'the run to finish on the second orchestrator', 90_000, 100)
      expect(done.status, done.error ?? '').toBe('completed')
    } finally {
      survivor.kill('SIGTERM')
      await survivor
    }
    // The operator's trail (issue 22, item 5): the survivor says which run it took over, from whom.
    const takeovers = jsonLogLines((await survivor).stdout).filter((l) => l.msg === 'took over an interrupted workflow run')
    expect(takeovers).toEqual([expect.objectContaining({ level: 'warn', daemon: 'orchestrator', workflowId: run.id, workflow: 'provision', previous_owner: doomedOwner, interrupted_ms: expect.any(Number) })])
    expect(fs.readdirSync(hostsDir)).toEqual([`local-${node.id}`])
    expect((await findNode(db, node.id))?.state).toBe('syncing')
    const steps = await listSteps(db, run.id)
    // Every step completed exactly once in the journal; the infrastructure step at most twice.
    expect(steps.every((s) => s.status === 'completed')).toBe(true)
    expect(steps.find((s) => s.stepKey === 'create-infrastructure#0')?.attempt).toBeLessThanOrEqual(2)
  })
})
