import fs from 'node:fs'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../../../src/errors.js'
import { triggerMigrations } from '../../../src/health/migration-trigger.js'
import { createLogger } from '../../../src/log.js'
import { applyHealthUpdate, type HealthEvent } from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import {
  requestMigration,
  requestProvision,
  type LifecycleDeps,
  type MigrateResult,
} from '../../../src/provisioning/index.js'
import { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import { decryptBackupFile, deriveBackupKey } from '../../../src/secrets/backup-keys.js'
import { loadDataKey } from '../../../src/secrets/data-keys.js'
import type { MasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKey } from '../../../src/secrets/node-keys.js'
import { getRun, type WorkflowRun, type WorkflowWorker } from '../../../src/workflows/index.js'
import { nodeplane, tempDir } from '../../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { otherCa, type RunningGateway } from '../agent-gateway/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished } from './harness.js'

const HOUR = 3_600_000

// A CA that did not sign the gateway's certificate, made once for the file: each one is a key
// pair made in JavaScript (a second or two of CPU), and any other CA is refused the same way.
let wrongCa: Buffer | undefined
const aWrongCa = (): Buffer => (wrongCa ??= otherCa())

// The two dialects' cases at the same time, each with a database, gateway, hosts directory, backup
// store and worker of its own: much of the time here is agents starting and chains syncing.
describeEachDialectConcurrently('the migrate workflow on the local provider on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway
  let provider: LocalInfrastructureProvider
  let deps: LifecycleDeps
  let worker: WorkflowWorker
  let root: string
  let store: string
  let masterKey: MasterKey
  const startWorker = (d: LifecycleDeps) => startLifecycleWorker(db, d)

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    // The profile's 500 ms blocks, not faster ones: the new chain's height is told from a fresh
    // chain's by time (a snapshot of 5 blocks or more against the few a chain started from block 0
    // would have made since).
    ;({ gateway, provider, deps, root, store, masterKey } = await lifecycleSetting(db, { migrationCooldownMs: HOUR }))
    worker = startWorker(deps)
  })
  afterEach(async () => {
    for (const host of fs.readdirSync(root)) await provider.destroyHost(host)
  })
  afterAll(async () => {
    await worker.stop()
    await gateway.stop()
    await t.destroy()
    fs.rmSync(store, { recursive: true, force: true })
  })

  const finished = (runId: string, timeoutMs?: number): Promise<WorkflowRun> => untilRunFinished(db, runId, timeoutMs)

  async function provisioned(): Promise<{ id: string; hostId: string }> {
    const node = await insertTestNode(db)
    const run = await finished((await requestProvision(db, node.id)).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    const row = await findNode(db, node.id)
    return { id: node.id, hostId: String(row?.host_id) }
  }

  async function blockNumber(hostId: string): Promise<number> {
    const config = JSON.parse(fs.readFileSync(path.join(root, hostId, 'state', 'config', 'devnet.json'), 'utf8')) as { rpc_port: number }
    const response = await fetch(`http://127.0.0.1:${config.rpc_port}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }),
    })
    return Number.parseInt(((await response.json()) as { result: string }).result, 16)
  }

  async function stateEvents(nodeId: string): Promise<HealthEvent[]> {
    const rows = (await db('outbox').where({ subject: `events.node.${nodeId}.health_changed` }).orderBy('id')) as { payload: unknown }[]
    return rows.map((r) => fromJson<HealthEvent>(r.payload)).filter((e) => e.dimension === 'state')
  }

  it('moves a down node to a new host: backup, restore, start, old host destroyed, host info updated, syncing', { timeout: 120_000 }, async () => {
    const node = await provisioned()
    // The chain has produced blocks worth keeping: it reports synced (devnet: after 3 blocks) and
    // is past block 5, which the snapshot is checked to hold below.
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'sync_status synced', 30_000, 100)
    await waitFor(async () => (await blockNumber(node.hostId)) >= 5, 'the old chain past block 5', 30_000, 100)
    await setNodeState(db, node.id, 'down')

    const now = new Date()
    const started = await requestMigration(db, node.id, { reason: 'down for 60 s', now })
    expect(started).toMatchObject({ created: true, run: { workflowName: 'migrate', workflowKey: `${node.id}:${now.toISOString()}` } })
    const run = await finished(started.run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    const result = run.result as MigrateResult
    const newHostId = `local-${node.id}-m${now.getTime()}`
    expect(result).toMatchObject({
      node_id: node.id,
      outcome: 'migrated',
      old_host_id: node.hostId,
      host_id: newHostId,
      binary_version: '1.0.0',
      restored: true,
      keys_injected: ['validator_key'],
    })
    expect(result.backup?.taken).toBe(true)
    expect(result.notes).toEqual([])

    const migrated = await findNode(db, node.id)
    expect(migrated).toMatchObject({ state: 'syncing', host_id: newHostId, provider: 'local', host_ip: '127.0.0.1' })
    expect(migrated?.last_migration_triggered_at?.toISOString()).toBe(now.toISOString())
    expect(fs.readdirSync(root)).toEqual([newHostId])
    expect((await findRegistration(db, node.id))?.disconnected_at).toBeNull()

    // The snapshot came from the old host and the new chain continues from it, not from block 0.
    // Encrypted in the store: read through the backup key the node's data key derives.
    const stored = fs.readFileSync(path.join(store, node.id, 'data', 'chain.json'))
    expect(stored.includes(Buffer.from('"height"'))).toBe(false)
    const backupKey = deriveBackupKey(await loadDataKey(db, masterKey, node.id), node.id)
    const plain = path.join(tempDir('nodeplane-migrate-backup-'), 'chain.json')
    await decryptBackupFile(backupKey, node.id, 'data/chain.json', path.join(store, node.id, 'data', 'chain.json'), plain, 0o600)
    const backedUp = JSON.parse(fs.readFileSync(plain, 'utf8')) as { height: number }
    expect(backedUp.height).toBeGreaterThanOrEqual(5)
    // `start` succeeded once the chain process stayed up through its settle period, not once it
    // listens (docs/node-agent.md); it makes no block before it listens.
    const restarted = await waitFor(async () => ({ height: await blockNumber(newHostId) }), 'the new chain to answer', 10_000)
    expect(restarted.height).toBeGreaterThanOrEqual(backedUp.height)
    // Keys: the generated one injected again, sealed to the new agent; the chain's own node key
    // (captured at provisioning) came back with the snapshot, so the node keeps its identity.
    const dataKey = await loadDataKey(db, masterKey, node.id)
    const newState = path.join(root, newHostId, 'state')
    expect(fs.readFileSync(path.join(newState, 'keys', 'validator_key'), 'utf8').trim()).toBe((await decryptNodeKey(db, dataKey, 'validator_key')).toString('hex'))
    expect(fs.readFileSync(path.join(newState, 'data', 'nodekey'), 'utf8')).toBe((await decryptNodeKey(db, dataKey, 'nodekey')).toString('utf8'))
    dataKey.destroy()

    const moves = (await stateEvents(node.id)).filter((e) => e.writer === 'migration').map((e) => `${e.from}->${e.to}`)
    expect(moves).toEqual(['down->maintenance', 'maintenance->syncing'])
    // The agent on the new host keeps reporting: the node's sync status comes back.
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'the new host to report synced', 30_000, 100)
  })

  it('a dead host and no snapshot: the chain starts from scratch on the new host but keeps its own node key, captured at provisioning', { timeout: 120_000 }, async () => {
    const node = await provisioned()
    const oldState = path.join(root, node.hostId, 'state')
    const identity = fs.readFileSync(path.join(oldState, 'data', 'nodekey'), 'utf8')
    // The host dies with its agent and chain: nothing can be backed up from it.
    const { pid } = JSON.parse(fs.readFileSync(path.join(root, node.hostId, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-pid, 'SIGKILL')
    await setNodeState(db, node.id, 'down')

    const now = new Date()
    const run = await finished((await requestMigration(db, node.id, { reason: 'host gone', now })).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    const result = run.result as MigrateResult
    expect(result).toMatchObject({ outcome: 'migrated', restored: false, host_id: `local-${node.id}-m${now.getTime()}` })
    // Asked before or after the gateway saw the agent go: either way no backup, and no long wait for one.
    expect(result.backup).toMatchObject({ taken: false, reason: expect.stringMatching(/the old host's agent is not connected|the agent disconnected before it answered/) })
    expect(result.notes).toContain('no backup; the chain syncs from scratch')
    expect([...(result.keys_injected ?? [])].sort()).toEqual(['nodekey', 'validator_key'])
    const newState = path.join(root, result.host_id as string, 'state')
    expect(fs.readFileSync(path.join(newState, 'data', 'nodekey'), 'utf8')).toBe(identity)
    expect(fs.statSync(path.join(newState, 'data', 'nodekey')).mode & 0o777).toBe(0o600)
    // The key is the chain's own: nothing of it under keys/.
    expect(fs.readdirSync(path.join(newState, 'keys'))).toEqual(['validator_key'])
    // A fresh chain, not a restored one: it starts again from its first blocks.
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'the new host to report synced', 30_000, 100)
  })

  it('a migration whose new host never gets an agent destroys the new host and restores degraded on the old host', { timeout: 90_000 }, async () => {
    const node = await provisioned()
    await setNodeState(db, node.id, 'down')
    // The agent can never register (it does not trust the gateway): the wait only has to run out.
    const shortWait: LifecycleDeps = { ...deps, agentReadyWaitMs: 1_000, agentBootstrap: { ...deps.agentBootstrap, caPem: aWrongCa().toString() } }
    await worker.stop()
    const isolated = startWorker(shortWait)
    let run: WorkflowRun
    try {
      run = await finished((await requestMigration(db, node.id, { reason: 'test' })).run.id)
    } finally {
      await isolated.stop()
      worker = startWorker(deps)
    }
    expect(run.status).toBe('failed')
    expect(run.error).toMatch(/did not register within [12] s/)
    expect(await findNode(db, node.id)).toMatchObject({ state: 'degraded', host_id: node.hostId })
    expect(fs.readdirSync(root)).toEqual([node.hostId])
    const compensation = (await stateEvents(node.id)).at(-1)
    expect(compensation).toMatchObject({ writer: 'compensation', forced: true, from: 'maintenance', to: 'degraded' })
    expect(compensation?.reason).toMatch(/^migration failed: /)
  })

  it('one run per attempt; the cooldown refuses a new attempt unless forced; a migration with no new infrastructure ends failed', { timeout: 60_000 }, async () => {
    const node = await insertTestNode(db)
    // A provider nothing can create hosts on: the attempt fails before any new infrastructure.
    await db('nodes').where({ id: node.id }).update({ state: 'healthy', provider: 'nowhere', region: 'local', instance_type: 'process' })

    await worker.stop()
    const t0 = new Date()
    let firstRunId: string
    try {
      const first = await requestMigration(db, node.id, { reason: 'test', now: t0 })
      expect(first.created).toBe(true)
      firstRunId = first.run.id
      // While the attempt runs, asking again (even forced) finds it.
      expect(await requestMigration(db, node.id, { reason: 'again', now: new Date(t0.getTime() + 1_000) })).toMatchObject({ created: false, run: { id: firstRunId } })
      expect(await requestMigration(db, node.id, { reason: 'again', now: new Date(t0.getTime() + 1_000), force: true })).toMatchObject({ created: false, run: { id: firstRunId } })
    } finally {
      worker = startWorker(deps)
    }
    const run = await finished(firstRunId)
    expect(run.status).toBe('failed')
    expect(run.error).toContain('no infrastructure provider "nowhere"')
    expect(await findNode(db, node.id)).toMatchObject({ state: 'failed', sync_status: 'unknown' })
    expect((await stateEvents(node.id)).at(-1)).toMatchObject({ writer: 'compensation', from: 'maintenance', to: 'failed' })
    expect(fs.readdirSync(root)).toEqual([])

    // The cooldown, on a node that can still be migrated.
    const other = await insertTestNode(db)
    const last = new Date(Date.now() - 10 * 60_000)
    await db('nodes').where({ id: other.id }).update({ state: 'degraded', provider: 'nowhere', region: 'local', instance_type: 'process', last_migration_triggered_at: last })
    const endsAt = new Date(last.getTime() + HOUR).toISOString()
    const refused = await requestMigration(db, other.id, { reason: 'test', cooldownMs: HOUR }).catch((err: unknown) => err)
    expect(refused).toBeInstanceOf(ConflictError)
    expect((refused as ConflictError).message).toBe(`node ${other.id} is in its migration cooldown until ${endsAt}`)
    expect((await findNode(db, other.id))?.last_migration_triggered_at?.getTime()).toBe(last.getTime())
    const forced = await requestMigration(db, other.id, { reason: 'operator', force: true, cooldownMs: HOUR })
    expect(forced.created).toBe(true)
    expect((await findNode(db, other.id))?.last_migration_triggered_at?.getTime()).toBe(forced.run.createdAt.getTime())
    await finished(forced.run.id)

    // Once the cooldown has passed (the clock is injected), a new attempt needs no force.
    const third = await insertTestNode(db)
    await db('nodes').where({ id: third.id }).update({ state: 'down', provider: 'nowhere', region: 'local', instance_type: 'process', last_migration_triggered_at: last })
    const later = await requestMigration(db, third.id, { reason: 'test', cooldownMs: HOUR, now: new Date(last.getTime() + HOUR) })
    expect(later).toMatchObject({ created: true, run: { workflowKey: `${third.id}:${new Date(last.getTime() + HOUR).toISOString()}` } })
    await finished(later.run.id)
  })

  it("the health trigger's migration ends not_needed when a heartbeat brought the node back first; an operator's still moves a healthy node", { timeout: 60_000 }, async () => {
    const node = await insertTestNode(db)
    const previous = new Date(Date.now() - 3 * HOUR)
    // Down the longest of any node in this database, so the trigger (one per cycle) picks it. The
    // provider "nowhere" fails any migration that does go ahead, right after maintenance.
    await db('nodes')
      .where({ id: node.id })
      .update({ state: 'down', state_changed_at: new Date('2020-01-01T00:00:00Z'), provider: 'nowhere', region: 'local', instance_type: 'process', last_migration_triggered_at: previous })

    await worker.stop()
    let runId: string
    try {
      const triggered = await triggerMigrations(db, { now: new Date(), graceMs: 60_000, cooldownMs: HOUR, maxPerCycle: 1, logger: createLogger({ level: 'silent' }) })
      expect(triggered.started.map((s) => s.node_id)).toEqual([node.id])
      runId = triggered.started[0]!.run_id
      // The agent heartbeats again before the run's first step: heartbeat evaluation, down -> healthy.
      await db.transaction((trx) => applyHealthUpdate(trx, { nodeId: node.id, change: { writer: 'heartbeat_evaluation', state: 'healthy' }, reason: 'heartbeat received while down' }))
    } finally {
      worker = startWorker(deps)
    }
    const run = await finished(runId)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.input).toMatchObject({ nodeId: node.id, onlyIfDown: true, previousTriggeredAt: previous.toISOString() })
    expect(run.result).toMatchObject({ node_id: node.id, outcome: 'not_needed', reason: expect.stringContaining('node is healthy, no longer down') })
    const left = await findNode(db, node.id)
    expect(left).toMatchObject({ state: 'healthy' })
    // The attempt did nothing, so it holds no cooldown: the previous attempt's time is back.
    expect(left?.last_migration_triggered_at?.getTime()).toBe(previous.getTime())
    expect((await stateEvents(node.id)).filter((e) => e.writer === 'migration')).toEqual([])

    // An operator may move a healthy node (a host to retire, say): that attempt goes ahead.
    const operator = await requestMigration(db, node.id, { reason: 'operator', cooldownMs: HOUR })
    expect(operator.created).toBe(true)
    const moved = await finished(operator.run.id)
    expect(moved.status).toBe('failed')
    expect(moved.error).toContain('no infrastructure provider "nowhere"')
    expect((await stateEvents(node.id)).filter((e) => e.writer === 'migration').map((e) => `${e.from}->${e.to}`)).toEqual(['healthy->maintenance'])
  })

  it('refuses nodes that cannot be migrated, with the reason', async () => {
    const cases: [string, RegExp][] = [
      ['provisioning', /has not finished provisioning/],
      ['syncing', /cannot enter maintenance/],
      ['maintenance', /holds its maintenance window/],
      ['terminating', /being terminated/],
      ['terminated', /is terminated/],
      ['failed', /failed is final/],
    ]
    for (const [state, reason] of cases) {
      const node = await insertTestNode(db)
      await setNodeState(db, node.id, state)
      const error = await requestMigration(db, node.id, { reason: 'test' }).catch((err: unknown) => err)
      expect(error, state).toBeInstanceOf(ConflictError)
      expect((error as ConflictError).message).toBe(`node ${node.id} is ${state} and cannot be migrated`)
      expect((error as ConflictError).details).toMatch(reason)
      expect((await findNode(db, node.id))?.last_migration_triggered_at).toBeNull()
    }
    await expect(requestMigration(db, '0190f5c2-0000-7000-8000-000000000000', { reason: 'test' })).rejects.toBeInstanceOf(NotFoundError)
    await expect(requestMigration(db, 'not-a-uuid', { reason: 'test' })).rejects.toBeInstanceOf(ValidationError)
  })

  it('nodeplane node migrate: exit 4 in the cooldown naming its end, exit 3 for an unknown node, the run with --force', { timeout: 60_000 }, async () => {
    const node = await insertTestNode(db)
    const last = new Date(Date.now() - 60_000)
    await db('nodes').where({ id: node.id }).update({ state: 'down', provider: 'nowhere', region: 'local', instance_type: 'process', last_migration_triggered_at: last })
    const env = { DATABASE_URL: t.url, NODEPLANE_DATA_DIR: tempDir('nodeplane-migrate-cli-') }

    // Neither of these two writes anything: they run side by side.
    const [cooldown, unknown] = await Promise.all([
      nodeplane(['node', 'migrate', '--node', node.id, '--direct-db'], { env }),
      nodeplane(['node', 'migrate', '--node', '0190f5c2-0000-7000-8000-000000000000', '--direct-db', '--json'], { env }),
    ])
    expect(cooldown.exitCode, cooldown.stderr).toBe(4)
    expect(cooldown.stderr.split('\n')[0]).toBe(`Error: node ${node.id} is in its migration cooldown until ${new Date(last.getTime() + HOUR).toISOString()}`)

    expect(unknown.exitCode).toBe(3)
    expect(JSON.parse(unknown.stdout)).toMatchObject({ error: { name: 'NotFoundError', exit_code: 3 } })

    const forced = await nodeplane(['node', 'migrate', '--node', node.id.toUpperCase(), '--force', '--reason', 'operator', '--direct-db', '--json'], { env })
    expect(forced.exitCode, forced.stderr).toBe(0)
    const out = JSON.parse(forced.stdout) as { node_id: string; workflow: string; run_id: string; created: boolean; status: string }
    expect(out).toMatchObject({ node_id: node.id, workflow: 'migrate', created: true })
    const run = await finished(out.run_id)
    expect(run.input).toMatchObject({ nodeId: node.id, reason: 'operator', forced: true })
    // On the database (--direct-db) the CLI reads the cooldown from MIGRATION_COOLDOWN like the daemons do.
    await db('nodes').where({ id: node.id }).update({ state: 'down' })
    const short = await nodeplane(['node', 'migrate', '--node', node.id, '--direct-db', '--json'], { env: { ...env, MIGRATION_COOLDOWN: '1ms' } })
    expect(short.exitCode, short.stdout).toBe(0)
    await finished((JSON.parse(short.stdout) as { run_id: string }).run_id)
  })
})
