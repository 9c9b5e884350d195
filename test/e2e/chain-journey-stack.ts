/**
 * The setting the real-chain journeys share (anvil-journey.suite.ts, litecoin-journey.suite.ts):
 * one `nodeplane up` per database with short heartbeat, evaluation, workflow and migration
 * intervals, a connection to its control-plane database for waits (no CLI process per look), and
 * nodes bought the way a user buys one: `subscription create`, `payment create --wait` with the
 * test card provider, then healthy with application health ok. On Postgres `up` gets two empty
 * databases and migrates them itself. Everything `up` and its local hosts started is stopped.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import type { WorkflowRunDetail } from '../../src/workflows/views.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../helpers/db.js'
import { waitFor } from '../helpers/ports.js'

/** The intervals that keep a journey in seconds: heartbeats, evaluation cycles, workflow polling, a host death noticed and healed, a payment settled. */
const FAST_INTERVALS = {
  AGENT_HEARTBEAT_INTERVAL: '1s',
  HEALTH_EVALUATION_INTERVAL: '1s',
  WORKFLOW_POLL_INTERVAL: '250ms',
  HEARTBEAT_TIMEOUT: '5s',
  MIGRATION_GRACE: '2s',
  // Fencing: below HEARTBEAT_TIMEOUT + MIGRATION_GRACE (`up` checks it), as long as that allows.
  AGENT_FENCE_TIMEOUT: '6s',
  // The operator's migration and the automatic one after a host dies follow each other within seconds.
  MIGRATION_COOLDOWN: '1s',
  // A test card payment settles this long after it is made.
  PAYMENT_TEST_PROVIDER_DELAY: '250ms',
}

export interface NodeView {
  id: string
  subscription_id: string
  state: string
  sync_status: string
  application_health: string
  binary_version: string | null
}

export interface JourneyStack {
  /** The working directory of `up` and of every command (its data dir is `.nodeplane` in it). */
  readonly dir: string
  readonly dataDir: string
  readonly db: Db
  readonly stack: StackFile
  /** The admin API key `up` issued to its operator user (the CLI's credential here). */
  readonly adminKey: string
  /** A command with the stack's environment (the databases, for the commands that open them). */
  run(args: string[], env?: Record<string, string>): Promise<CliResult>
  /** The command's --json output, after checking it succeeded. */
  json<T>(result: CliResult): T
  /**
   * Subscribe and pay with the test card provider; returns the node once the paid subscription
   * has one. (Buy one at a time: a user's equal unpaid subscription is returned, not a new one.)
   */
  subscribeAndPay(chain: string, nodeType: string): Promise<string>
  /** The node healthy with application health ok, as `node show` prints it to its owner. */
  untilBought(nodeId: string, chain: string): Promise<NodeView>
  /** healthy, synced, application health ok, as the database has it. */
  untilHealthy(nodeId: string, what: string, timeoutMs?: number): Promise<void>
  /** The node's state directory on its current host (`<data dir>/hosts/<host>/state`). */
  stateDir(nodeId: string): Promise<string>
  hostId(nodeId: string): Promise<string>
  /** Waits for the workflow run to end, then returns it as `workflow show --json` prints it. */
  untilRun(runId: string, timeoutMs?: number): Promise<WorkflowRunDetail>
  /** Waits for a migration of the node other than `known` (the ones already seen) to start and end. */
  untilNextMigration(nodeId: string, known: string[]): Promise<WorkflowRunDetail>
  /** Kills the node's host outright: its agent and chain, by the process group the host recorded. */
  killHost(nodeId: string): Promise<void>
}

export interface JourneyStackOptions {
  /** Extra environment for `up` (and every command), computed before it starts. */
  env?: () => Promise<Record<string, string>> | Record<string, string>
}

/** Registers the file's beforeAll/afterAll for `dialect` and returns the stack they run. */
export function useJourneyStack(dialect: Dialect, options: JourneyStackOptions = {}): JourneyStack {
  let dir = ''
  let up: ReturnType<typeof spawnNodeplane> | undefined
  let db: Db | undefined
  let stack: StackFile | undefined
  let adminKey = ''
  const databases: TestDatabase[] = []
  const env: Record<string, string> = {}

  const run = (args: string[], extra: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env: { ...env, ...extra } })
  const json = <T>(result: CliResult): T => {
    expect(result.exitCode, `${result.stderr}${result.stdout}`).toBe(0)
    return JSON.parse(result.stdout) as T
  }
  const requireDb = (): Db => {
    if (!db) throw new Error('the stack is not up')
    return db
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    Object.assign(env, (await options.env?.()) ?? {})
    if (dialect === 'postgres') {
      const controlPlane = await createTestDatabase('postgres', { migrated: false })
      databases.push(controlPlane)
      const payments = await createTestDatabase('postgres', { database: 'payments', migrated: false })
      databases.push(payments)
      Object.assign(env, { DATABASE_URL: controlPlane.url, PAYMENTS_DATABASE_URL: payments.url })
    }
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), ...FAST_INTERVALS, ...env } })
    stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
    db = dialect === 'postgres' ? (databases[0] as TestDatabase).connect() : createDatabase(stack.database_url)
    if (dialect === 'postgres') expect(stack.database_url).toMatch(/^postgres:\/\//)
    adminKey = fs.readFileSync(stack.admin_api_key_file, 'utf8').trim()
  }, 90_000)

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    const stopped = up ? await up : undefined
    // Local hosts outlive `up` (docs/infrastructure.md): stop each one's agent and chain.
    if (dir) await stopLocalHosts(path.join(dir, '.nodeplane', 'hosts'))
    for (const database of databases.splice(0)) await database.destroy()
    if (stopped) expect(stopped.exitCode, String(stopped.all).slice(-2000)).toBe(143)
  }, 60_000)

  const hostId = async (nodeId: string): Promise<string> => String(((await requireDb()('nodes').where({ id: nodeId }).first('host_id')) as { host_id: string | null } | undefined)?.host_id)
  const stateDir = async (nodeId: string): Promise<string> => path.join(dir, '.nodeplane', 'hosts', await hostId(nodeId), 'state')

  async function untilHealthy(nodeId: string, what: string, timeoutMs = 90_000): Promise<void> {
    let seen = ''
    await waitFor(async () => {
      const node = (await requireDb()('nodes').where({ id: nodeId }).first('state', 'sync_status', 'application_health')) as Pick<NodeView, 'state' | 'sync_status' | 'application_health'> | undefined
      seen = JSON.stringify(node)
      if (node?.state === 'failed') {
        const errors = (await requireDb()('workflow_runs').where('workflow_key', 'like', `${nodeId}%`).pluck('error')) as Array<string | null>
        throw new Error(`${what}: the node failed (${errors.filter(Boolean).join('; ')})`)
      }
      return node?.state === 'healthy' && node.sync_status === 'synced' && node.application_health === 'ok'
    }, what, timeoutMs, 250).catch((err: Error) => {
      throw new Error(`${err.message}; last seen ${seen}`)
    })
  }

  async function untilRun(runId: string, timeoutMs = 90_000): Promise<WorkflowRunDetail> {
    await waitFor(
      async () => ['completed', 'failed'].includes(((await requireDb()('workflow_runs').where({ id: runId }).first('status')) as { status: string } | undefined)?.status ?? ''),
      `workflow run ${runId} to end`,
      timeoutMs,
      250,
    )
    return json<WorkflowRunDetail>(await run(['workflow', 'show', '--id', runId, '--json']))
  }

  return {
    get dir() {
      return dir
    },
    get dataDir() {
      return path.join(dir, '.nodeplane')
    },
    get db() {
      return requireDb()
    },
    get stack() {
      if (!stack) throw new Error('the stack is not up')
      return stack
    },
    get adminKey() {
      return adminKey
    },
    run,
    json,
    untilHealthy,
    stateDir,
    hostId,
    async subscribeAndPay(chain, nodeType) {
      const subscription = json<{ id: string; status: string }>(await run(['subscription', 'create', '--chain', chain, '--node-type', nodeType, '--duration', '1w', '--json']))
      expect(subscription.status).toBe('pending_payment')
      json(await run(['payment', 'create', '--subscription', subscription.id, '--method', 'card', '--wait', '--json']))
      return waitFor(
        async () => ((await requireDb()('nodes').where({ subscription_id: subscription.id }).first('id')) as { id: string } | undefined)?.id,
        `a node for subscription ${subscription.id}`,
        30_000,
        250,
      )
    },
    async untilBought(nodeId, chain) {
      await untilHealthy(nodeId, `the ${chain} node healthy with application health ok`)
      const shown = json<NodeView>(await run(['node', 'show', '--id', nodeId, '--json']))
      expect(shown).toMatchObject({ id: nodeId, state: 'healthy', application_health: 'ok' })
      return shown
    },
    untilRun,
    async untilNextMigration(nodeId, known) {
      const runId = await waitFor(
        async () =>
          ((await requireDb()('workflow_runs')
            .where({ workflow_name: 'migrate' })
            .andWhere('workflow_key', 'like', `${nodeId}:%`)
            .whereNotIn('id', known)
            .first('id')) as { id: string } | undefined)?.id,
        `a migration of node ${nodeId}`,
        60_000,
        250,
      )
      return untilRun(runId)
    },
    async killHost(nodeId) {
      const record = JSON.parse(fs.readFileSync(path.join(path.dirname(await stateDir(nodeId)), 'host.json'), 'utf8')) as { pid: number }
      process.kill(-record.pid, 'SIGKILL')
    },
  }
}

/** Stops every local host's agent (and with it its chain) by the process group its host.json recorded. */
async function stopLocalHosts(hostsDir: string): Promise<void> {
  for (const host of fs.existsSync(hostsDir) ? fs.readdirSync(hostsDir) : []) {
    const record = path.join(hostsDir, host, 'host.json')
    if (!fs.existsSync(record)) continue
    const { pid } = JSON.parse(fs.readFileSync(record, 'utf8')) as { pid: number }
    if (!Number.isInteger(pid) || pid <= 1) continue
    try {
      process.kill(-pid, 'SIGTERM')
    } catch {
      continue
    }
    await waitFor(async () => {
      try {
        process.kill(-pid, 0)
        return false
      } catch {
        return true
      }
    }, `host ${host} to stop`, 20_000, 100).catch(() => {
      try {
        process.kill(-pid, 'SIGKILL')
      } catch {
        // gone meanwhile
      }
    })
  }
}
