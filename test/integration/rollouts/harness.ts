/**
 * A fleet of real devnet nodes for the rollout tests: the local provider's agent processes on
 * 1.0.0, provisioned through the provision workflow and made healthy by the heartbeat
 * evaluation, and a worker that runs the lifecycle and rollout workflows. Agents heartbeat
 * every 200 ms (the provisioning harness's agent environment) so health validation has reports
 * to judge.
 *
 * `fleetTests` gives each test a database and a fleet of its own, at most `lanes` at once (the
 * rollout suites run their tests one after another: three fleets at once, with devnet blocks of
 * 100 ms, starved each other in the full suite on two cores); see docs/development.md.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { TestContext } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { createLogger } from '../../../src/log.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { insertRollout, requireRollout, type NewRollout, type RolloutRecord } from '../../../src/rollouts/store.js'
import type { RolloutStatus } from '../../../src/rollouts/states.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { lifecycleSetting, startLifecycleWorker, type LifecycleSetting } from '../provisioning/harness.js'

export const logger = createLogger({ level: 'silent' })
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
export const DEVNET_1_1_0 = path.join(repoRoot, 'chains', 'devnet', 'releases', 'devnet-node-1.1.0.mjs')

export interface Fleet {
  setting: LifecycleSetting
  worker: WorkflowWorker
  operatorId: string
  nodes: string[]
  stop(): Promise<void>
}

export type FleetOptions = Pick<Parameters<typeof lifecycleSetting>[1] & object, 'agentEnv' | 'artifacts' | 'catalogue' | 'devnetBlockTimeMs'>

export async function startFleet(db: Db, size: number, options: FleetOptions = {}): Promise<Fleet> {
  const setting = await lifecycleSetting(db, { logger, heartbeatIntervalSeconds: 1, ...options })
  const worker = startLifecycleWorker(db, setting.deps, 8, { rollouts: true })
  // The heartbeat evaluation, as the health-evaluator runs it: upgraded nodes become healthy again.
  let evaluating = Promise.resolve()
  const evaluator = setInterval(() => {
    evaluating = evaluating.then(() => evaluateHeartbeats(db, { now: new Date(), heartbeatTimeoutMs: 60_000, intervalMs: 1_000, logger })).then(
      () => undefined,
      () => undefined,
    )
  }, 300)
  const stop = async () => {
    clearInterval(evaluator)
    await evaluating
    await worker.stop()
    // The hosts' agents stop at once, each stopping its chain process.
    await Promise.all(fs.readdirSync(setting.root).map((host) => setting.provider.destroyHost(host)))
    await setting.gateway.stop()
    fs.rmSync(setting.root, { recursive: true, force: true })
    fs.rmSync(setting.store, { recursive: true, force: true })
  }
  try {
    const operatorId = await insertUser(db)
    const nodes: string[] = []
    for (let i = 0; i < size; i++) {
      const subscription = await insertSubscription(db, await insertUser(db))
      const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })
      await requestProvision(db, node.id)
      nodes.push(node.id)
    }
    // One query for the fleet's states, every 100 ms.
    const provisioned = await waitFor(async () => {
      const rows = (await db('nodes').whereIn('id', nodes).select('id', 'state')) as Array<{ id: string; state: string }>
      const failed = rows.filter((r) => r.state === 'failed').map((r) => r.id)
      if (failed.length > 0) return { failed }
      return rows.length === nodes.length && rows.every((r) => r.state === 'healthy') && { failed }
    }, 'the fleet to be provisioned and healthy', 120_000, 100).catch(async (err: unknown) => {
      // Where each node stood when the wait gave up: a timeout under load is otherwise undiagnosable.
      const states = (await db('nodes').whereIn('id', nodes).select('id', 'state', 'sync_status', 'application_health')) as Array<Record<string, string>>
      const steps = (await db('workflow_steps')
        .join('workflow_runs', 'workflow_runs.id', 'workflow_steps.run_id')
        .whereIn('workflow_runs.workflow_key', nodes)
        .whereNot('workflow_steps.status', 'completed')
        .select('workflow_runs.workflow_key', 'workflow_steps.step_key', 'workflow_steps.status', 'workflow_steps.error')) as Array<Record<string, string | null>>
      throw new Error(`${String(err)}; nodes: ${JSON.stringify(states)}; steps not completed: ${JSON.stringify(steps)}`)
    })
    if (provisioned.failed.length > 0) {
      // Say why, at once (a throw in waitFor's probe would only be retried until its deadline):
      // a flake here under load is otherwise undiagnosable.
      const errors = (await db('workflow_steps')
        .join('workflow_runs', 'workflow_runs.id', 'workflow_steps.run_id')
        .whereIn('workflow_runs.workflow_key', provisioned.failed)
        .whereNotNull('workflow_steps.error')
        .select('workflow_runs.workflow_name', 'workflow_steps.step_key', 'workflow_steps.error')) as Array<{ workflow_name: string; step_key: string; error: string }>
      throw new Error(`a node failed to provision: ${errors.map((e) => `${e.workflow_name}/${e.step_key}: ${e.error}`).join('; ') || 'no step error recorded'}`)
    }
    return { setting, worker, operatorId, nodes, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

/** How many of a file's fleet tests run at once (each is a few agent and chain processes, mostly waiting). */
export const FLEET_LANES = 3

export interface FleetTest {
  db: Db
  fleet: Fleet
  /** A temporary directory removed when the test ends. */
  dir(): string
}

/**
 * For a file's concurrent tests (`it.concurrent`): `setUp(context, size)` waits for one of
 * `lanes` slots, then creates a database of `dialect` and a fleet of `size` nodes on it, both
 * stopped (and the slot freed) when the test ends, passed or failed. Call it once per file (the
 * slots are the file's: a helper module's top level is shared by the files a worker runs).
 */
export function fleetTests(dialect: Dialect, lanes = FLEET_LANES): (context: Pick<TestContext, 'onTestFinished'>, size: number, options?: FleetOptions) => Promise<FleetTest> {
  let free = lanes
  const waiting: Array<() => void> = []
  const release = (): void => {
    const next = waiting.shift()
    if (next) next()
    else free++
  }
  return async ({ onTestFinished }, size, options = {}) => {
    if (free > 0) free--
    else await new Promise<void>((resolve) => waiting.push(resolve))
    let database: TestDatabase | undefined
    let fleet: Fleet | undefined
    const dirs: string[] = []
    onTestFinished(async () => {
      try {
        await fleet?.stop()
        await database?.destroy()
        for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
      } finally {
        release()
      }
    })
    database = await createTestDatabase(dialect)
    fleet = await startFleet(database.db, size, options)
    const dir = (): string => {
      const d = tempDir()
      dirs.push(d)
      return d
    }
    return { db: database.db, fleet, dir }
  }
}

/** A manual-mode rollout of the devnet fleet (test setup: the API's validation is tested elsewhere). */
export async function devnetRollout(db: Db, by: Pick<Fleet, 'operatorId'>, fields: Partial<NewRollout> = {}): Promise<RolloutRecord> {
  return insertRollout(
    db,
    {
      chain_profile_id: 'devnet',
      node_type: 'full',
      binary_name: 'devnet-node',
      source_version: '1.0.0',
      target_version: '1.1.0',
      target_binary_url: pathToFileURL(DEVNET_1_1_0).href,
      target_binary_checksum: `sha256:${sha256File(DEVNET_1_1_0)}`,
      strategy: 'rolling',
      batch_size: 2,
      canary_size: null,
      failure_threshold: 0.5,
      // Long enough for several heartbeats (every 200 ms) after the upgrade, and for devnet's sync
      // (3 blocks of 500 ms) to end within it, so the node is healthy right after the window;
      // 2 s rather than 1.5 s, for the new binary's first reports on a loaded machine (a canary
      // once failed its 1.5 s window so).
      health_wait_duration_ms: 2_000,
      created_by: by.operatorId,
      ...fields,
    },
    new Date(),
  )
}

export function sha256File(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex')
}

/** A chain program that starts like devnet-node and crashes a second later. */
export function crashingArtifact(dir: string): { url: string; checksum: string } {
  const file = path.join(dir, 'devnet-node-9.9.9-crash.mjs')
  fs.writeFileSync(file, "setTimeout(() => { process.stderr.write('crashing on purpose\\n'); process.exit(3) }, 1200)\nsetInterval(() => {}, 1000)\n")
  return { url: pathToFileURL(file).href, checksum: `sha256:${sha256File(file)}` }
}

export async function untilStatus(db: Db, rolloutId: string, statuses: RolloutStatus[], what = statuses.join(' or '), timeoutMs = 120_000): Promise<RolloutRecord> {
  return waitFor(async () => {
    const r = await requireRollout(db, rolloutId)
    return statuses.includes(r.status) ? r : undefined
  }, `rollout ${rolloutId} to be ${what}`, timeoutMs, 100)
}

export async function binaryVersions(db: Db, nodes: string[]): Promise<Array<string | null>> {
  const rows = (await db('node_config_state').whereIn('node_id', nodes).select('node_id', 'binary_version')) as Array<{ node_id: string; binary_version: string | null }>
  return nodes.map((id) => rows.find((r) => r.node_id === id)?.binary_version ?? null)
}

/** What each node's agent reports it runs (its heartbeats' binary_version). */
export async function reportedVersions(db: Db, nodes: string[]): Promise<Array<string | null>> {
  const rows = (await db('agent_status').whereIn('node_id', nodes).select('node_id', 'binary_version')) as Array<{ node_id: string; binary_version: string | null }>
  return nodes.map((id) => rows.find((r) => r.node_id === id)?.binary_version ?? null)
}

export async function eventSubjects(db: Db, prefix: string): Promise<string[]> {
  return (await db('outbox').where('subject', 'like', `${prefix}%`).orderBy('id').pluck('subject')) as string[]
}

export async function eventPayloads<T>(db: Db, subject: string): Promise<T[]> {
  const rows = (await db('outbox').where({ subject }).orderBy('id').pluck('payload')) as unknown[]
  return rows.map((p) => fromJson<T>(p))
}
