/**
 * The setting the litecoin tests share, per dialect: a database, the provisioning harness (real
 * gateway, local provider, agents from dist/) with the repository's catalogue, a worker, the
 * heartbeat evaluation as the health-evaluator runs it, and the api-server's routes; plus RPC to a
 * node's litecoind with the cookie it wrote, as a user on the host would call it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { getProfile, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { evaluatePolicies } from '../../../src/health/policy-evaluation.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { createLogger } from '../../../src/log.js'
import { findNode, insertNode } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { assertLitecoindInstalled } from '../../helpers/litecoind.js'
import { waitFor } from '../../helpers/ports.js'
import { newUser } from '../auth/api-harness.js'
import { Resources } from '../http/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished, type LifecycleSetting } from '../provisioning/harness.js'

const quiet = createLogger({ level: 'silent' })

export interface LitecoinStack {
  readonly db: Db
  readonly setting: LifecycleSetting
  readonly apiUrl: string
  stateDirOf(nodeId: string): Promise<string>
  rpc<T>(nodeId: string, method: string, params?: unknown[], wallet?: string): Promise<T>
  /** Once the node answers: `start` returns once litecoind stayed up a moment, before its RPC and wallet are up. */
  answer<T>(nodeId: string, method: string, params?: unknown[], wallet?: string): Promise<T>
  /** healthy, synced, and application health ok by the profile's policy. */
  untilHealthy(nodeId: string, what: string): Promise<unknown>
  /** A litecoin node of a new user, provisioned through the provision workflow until healthy. */
  provisionedLitecoinNode(): Promise<{ id: string; userId: string }>
}

/** Registers the file's beforeAll/afterAll for `dialect` and returns the stack they run. */
export function useLitecoinStack(dialect: Dialect): LitecoinStack {
  const resources = new Resources()
  let t: TestDatabase
  let db: Db
  let setting: LifecycleSetting
  let worker: WorkflowWorker
  let evaluator: NodeJS.Timeout
  let evaluating = Promise.resolve()
  let apiUrl: string

  beforeAll(async () => {
    assertLitecoindInstalled()
    t = await createTestDatabase(dialect)
    db = t.db
    setting = await lifecycleSetting(db, { migrationCooldownMs: 3_600_000 })
    setting.deps = { ...setting.deps, chains: staticChainSource(withSmallKeypool(setting.deps.chains.current())) }
    worker = startLifecycleWorker(db, setting.deps)
    // The heartbeat and policy evaluations, as the health-evaluator runs them: a synced node becomes
    // healthy, and the profile's health policy (rpc_up, block_lag) judges its application health.
    evaluator = setInterval(() => {
      const now = new Date()
      evaluating = evaluating
        .then(() => evaluateHeartbeats(db, { now, heartbeatTimeoutMs: 60_000, intervalMs: 250, logger: quiet }))
        .then(() => evaluatePolicies(db, { now, catalogue: setting.deps.chains.current(), reportMaxAgeMs: 60_000, logger: quiet }))
        .then(
          () => undefined,
          () => undefined,
        )
    }, 250)
    const { authenticate } = authenticatorFromSettings(
      { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
      { db },
    )
    apiUrl = (await resources.api({ db, authenticate, rateLimit: createApiRateLimiter({ perMinute: 10_000 }).rateLimit, routes: controlPlaneRoutes({ db, masterKey: setting.masterKey }) })).url
  }, 60_000)
  afterAll(async () => {
    clearInterval(evaluator)
    await evaluating
    await worker?.stop()
    for (const host of fs.existsSync(setting?.root ?? '') ? fs.readdirSync(setting.root) : []) await setting.provider.destroyHost(host)
    await setting?.gateway.stop()
    await resources.cleanup()
    await t?.destroy()
  })

  const stateDirOf = async (nodeId: string) => path.join(setting.root, String((await findNode(db, nodeId))?.host_id), 'state')

  async function rpc<T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> {
    const state = await stateDirOf(nodeId)
    const port = /^rpcport=(\d+)$/m.exec(fs.readFileSync(path.join(state, 'config', 'litecoin.conf'), 'utf8'))?.[1]
    const cookie = fs.readFileSync(path.join(state, 'data', 'regtest', '.cookie'), 'utf8').trim()
    const response = await fetch(`http://127.0.0.1:${port}${wallet ? `/wallet/${wallet}` : '/'}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(cookie).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '1.0', id: 0, method, params }),
    })
    const answer = (await response.json()) as { result: T; error: { code: number; message: string } | null }
    if (answer.error) throw new Error(`${method}: ${answer.error.code} ${answer.error.message}`)
    return answer.result
  }

  const untilHealthy = (nodeId: string, what: string) =>
    waitFor(async () => {
      const node = await findNode(db, nodeId)
      return node?.state === 'healthy' && node.sync_status === 'synced' && node.application_health === 'ok' && node
    }, what, 60_000, 100)

  return {
    get db() {
      return db
    },
    get setting() {
      return setting
    },
    get apiUrl() {
      return apiUrl
    },
    stateDirOf,
    rpc,
    answer: <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string) =>
      waitFor(() => rpc<T>(nodeId, method, params, wallet).then((value) => ({ value })), `${method} to answer`, 30_000, 200).then((r) => r.value),
    untilHealthy,
    async provisionedLitecoinNode() {
      const user = await newUser(db)
      const subscriptionId = await insertSubscription(db, user.id)
      await db('subscriptions').where({ id: subscriptionId }).update({ chain_profile_id: 'litecoin' })
      const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'litecoin', node_type: 'full' })
      const run = await untilRunFinished(db, (await requestProvision(db, node.id)).run.id, 120_000)
      expect(run.status, run.error ?? '').toBe('completed')
      expect(run.result).toMatchObject({ outcome: 'provisioned', binary_version: '0.21.2.1', keys: { captured: ['wallet_seed'] } })
      await untilHealthy(node.id, 'the litecoin node to be healthy')
      return { id: node.id, userId: user.id }
    },
  }
}

/**
 * The catalogue with litecoind's wallet keypool at 100 keys instead of 1,000: creating, dumping and
 * backing up the wallet take a fraction as long, and nothing this test checks depends on the
 * keypool's size (the seed, the balance and the derivation of every key are the same).
 */
function withSmallKeypool(catalogue: ChainCatalogue): ChainCatalogue {
  const litecoin = getProfile(catalogue, 'litecoin')
  if (!litecoin.config_files.some((f) => f.template.includes('\nserver=1\n'))) throw new Error('the litecoin profile no longer sets server=1 in its config')
  const smaller = { ...litecoin, config_files: litecoin.config_files.map((f) => ({ ...f, template: f.template.replace('\nserver=1\n', '\nserver=1\nkeypool=100\n') })) }
  return { ...catalogue, profiles: new Map([...catalogue.profiles, ['litecoin', smaller]]) }
}

