/**
 * The setting the real-chain integration tests share (test/integration/chains/), per dialect: a
 * fresh database; the provisioning harness (real agent-gateway, local provider, node agents from
 * dist/) with the repository's catalogue, optionally changed; a workflow worker (lifecycle, and
 * rollouts when asked); the heartbeat and policy evaluations as the health-evaluator's cycle runs
 * them, so a synced node becomes healthy and its application health is judged by the profile's
 * policy; optionally the api-server's routes. Everything is stopped after the file, the hosts
 * (agents and chains) first.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll } from 'vitest'
import { createApiRateLimiter } from '../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../src/auth/authenticator.js'
import type { ChainCatalogue } from '../../src/config/chains.js'
import type { Db } from '../../src/db/knex.js'
import { evaluateHeartbeats } from '../../src/health/heartbeat-evaluation.js'
import { evaluatePolicies } from '../../src/health/policy-evaluation.js'
import { controlPlaneRoutes } from '../../src/http/routes/index.js'
import { createLogger } from '../../src/log.js'
import { findNode, insertNode, type NodeRecord } from '../../src/nodes/node-store.js'
import type { WorkflowWorker } from '../../src/workflows/index.js'
import { Resources } from '../integration/http/harness.js'
import { lifecycleSetting, startLifecycleWorker, type LifecycleSetting } from '../integration/provisioning/harness.js'
import { createTestDatabase, type Dialect, type TestDatabase } from './db.js'
import { insertSubscriptionOf, insertUser } from './fixtures.js'
import { waitFor } from './ports.js'

const quiet = createLogger({ level: 'silent' })
/** One evaluation cycle this often: a node is judged within a fraction of a second of its report. */
const EVALUATION_INTERVAL_MS = 250

export interface ChainHarnessOptions {
  /** Changes the repository's catalogue (a default version, a smaller wallet keypool, …). */
  catalogue?: (catalogue: ChainCatalogue) => ChainCatalogue
  /** Runs the rollout workflows too. */
  rollouts?: boolean
  /** Workflow runs at once (several nodes provisioned or upgraded side by side). */
  concurrency?: number
  migrationCooldownMs?: number
  /** Serves the api-server's routes (keys export, …) at `apiUrl`. */
  api?: boolean
}

export interface ChainHarness {
  readonly db: Db
  readonly setting: LifecycleSetting
  /** Set only with `api: true`. */
  readonly apiUrl: string
  /** An active subscription of a new user for `chain`, and its node (`new`, not provisioned). */
  newNode(chain: string, nodeType?: string): Promise<{ node: NodeRecord; userId: string }>
  /** The node's state directory on its current host. */
  stateDirOf(nodeId: string): Promise<string>
  /** healthy, synced and application health ok by the profile's policy; the last state seen and the agent's report when it times out. */
  untilHealthy(nodeId: string, what: string, timeoutMs?: number): Promise<NodeRecord>
  /** Kills the node's host outright (agent and chain), by the process group the host recorded. */
  killHost(nodeId: string): Promise<void>
}

/** Registers the file's beforeAll/afterAll for `dialect` and returns the harness they run. */
export function useChainHarness(dialect: Dialect, options: ChainHarnessOptions = {}): ChainHarness {
  const resources = new Resources()
  let t: TestDatabase | undefined
  let setting: LifecycleSetting | undefined
  let worker: WorkflowWorker | undefined
  let evaluator: NodeJS.Timeout | undefined
  let evaluating = Promise.resolve()
  let apiUrl = ''

  const db = (): Db => {
    if (!t) throw new Error('the chain harness is not set up')
    return t.db
  }
  const lifecycle = (): LifecycleSetting => {
    if (!setting) throw new Error('the chain harness is not set up')
    return setting
  }

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    const current = (setting = await lifecycleSetting(t.db, {
      logger: quiet,
      heartbeatIntervalSeconds: 1,
      migrationCooldownMs: options.migrationCooldownMs ?? 3_600_000,
      ...(options.catalogue ? { catalogue: options.catalogue } : {}),
    }))
    worker = startLifecycleWorker(t.db, current.deps, options.concurrency ?? 4, { rollouts: options.rollouts ?? false })
    const database = t.db
    evaluator = setInterval(() => {
      evaluating = evaluating
        .then(async () => {
          const now = new Date()
          await evaluateHeartbeats(database, { now, heartbeatTimeoutMs: 60_000, intervalMs: EVALUATION_INTERVAL_MS, logger: quiet })
          await evaluatePolicies(database, { now, catalogue: current.deps.chains.current(), reportMaxAgeMs: 60_000, logger: quiet })
        })
        .catch(() => undefined)
    }, EVALUATION_INTERVAL_MS)
    if (options.api) {
      const { authenticate } = authenticatorFromSettings(
        { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
        { db: database },
      )
      apiUrl = (await resources.api({ db: database, authenticate, rateLimit: createApiRateLimiter({ perMinute: 10_000 }).rateLimit, routes: controlPlaneRoutes({ db: database, masterKey: current.masterKey }) })).url
    }
  }, 60_000)

  afterAll(async () => {
    clearInterval(evaluator)
    await evaluating
    await worker?.stop()
    if (setting) {
      const { root, provider, gateway, store } = setting
      await Promise.all((fs.existsSync(root) ? fs.readdirSync(root) : []).map((host) => provider.destroyHost(host)))
      await gateway.stop()
      fs.rmSync(root, { recursive: true, force: true })
      fs.rmSync(store, { recursive: true, force: true })
    }
    await resources.cleanup()
    await t?.destroy()
  }, 60_000)

  const stateDirOf = async (nodeId: string): Promise<string> => path.join(lifecycle().root, String((await findNode(db(), nodeId))?.host_id), 'state')

  return {
    get db() {
      return db()
    },
    get setting() {
      return lifecycle()
    },
    get apiUrl() {
      return apiUrl
    },
    stateDirOf,
    async newNode(chain, nodeType = 'full') {
      const userId = await insertUser(db())
      const subscriptionId = await insertSubscriptionOf(db(), userId, { chain, nodeType, instanceType: 'local.small' })
      const node = await insertNode(db(), { subscription_id: subscriptionId, chain_profile_id: chain, node_type: nodeType, provider: 'local', region: 'local', instance_type: 'local.small' })
      return { node, userId }
    },
    async untilHealthy(nodeId, what, timeoutMs = 60_000) {
      let seen = ''
      try {
        return await waitFor(async () => {
          const node = await findNode(db(), nodeId)
          seen = `${node?.state}, ${node?.sync_status}, ${node?.application_health}`
          return node?.state === 'healthy' && node.sync_status === 'synced' && node.application_health === 'ok' && node
        }, what, timeoutMs, 100)
      } catch (err) {
        const report = (await db()('agent_status').where({ node_id: nodeId }).first()) as unknown
        throw new Error(`${(err as Error).message}; last seen (state, sync, application health): ${seen}; agent report ${JSON.stringify(report)}`)
      }
    },
    async killHost(nodeId) {
      const { pid } = JSON.parse(fs.readFileSync(path.join(path.dirname(await stateDirOf(nodeId)), 'host.json'), 'utf8')) as { pid: number }
      process.kill(-pid, 'SIGKILL')
    },
  }
}
