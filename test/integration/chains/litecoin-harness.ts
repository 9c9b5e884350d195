/**
 * The setting the litecoin tests share, per dialect: the chain harness (test/helpers/chain-harness.ts:
 * database, provisioning harness, worker, heartbeat and policy evaluations, the api-server's
 * routes) with the repository's catalogue, its litecoin wallet keypool made small; plus RPC to a
 * node's litecoind with the cookie it wrote, as a user on the host would call it.
 */
import { beforeAll, expect } from 'vitest'
import { getProfile, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { useChainHarness } from '../../helpers/chain-harness.js'
import type { Dialect } from '../../helpers/db.js'
import { assertLitecoindInstalled, nodeRpc } from '../../helpers/litecoind.js'
import { waitFor } from '../../helpers/ports.js'
import type { LifecycleSetting } from '../provisioning/harness.js'
import { untilRunFinished } from '../provisioning/harness.js'

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
  /** Kills the node's host outright (agent and litecoind). */
  killHost(nodeId: string): Promise<void>
  /** A litecoin node of a new user, provisioned through the provision workflow until healthy. */
  provisionedLitecoinNode(): Promise<{ id: string; userId: string }>
}

/** Registers the file's beforeAll/afterAll for `dialect` and returns the stack they run. */
export function useLitecoinStack(dialect: Dialect): LitecoinStack {
  beforeAll(() => assertLitecoindInstalled())
  const h = useChainHarness(dialect, { catalogue: withSmallKeypool, api: true })

  const rpc = async <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> => nodeRpc<T>(await h.stateDirOf(nodeId), method, params, wallet)

  return {
    get db() {
      return h.db
    },
    get setting() {
      return h.setting
    },
    get apiUrl() {
      return h.apiUrl
    },
    stateDirOf: (nodeId) => h.stateDirOf(nodeId),
    rpc,
    answer: <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string) =>
      waitFor(() => rpc<T>(nodeId, method, params, wallet).then((value) => ({ value })), `${method} to answer`, 30_000, 200).then((r) => r.value),
    untilHealthy: (nodeId, what) => h.untilHealthy(nodeId, what),
    killHost: (nodeId) => h.killHost(nodeId),
    async provisionedLitecoinNode() {
      const { node, userId } = await h.newNode('litecoin')
      const run = await untilRunFinished(h.db, (await requestProvision(h.db, node.id)).run.id, 120_000)
      expect(run.status, run.error ?? '').toBe('completed')
      expect(run.result).toMatchObject({ outcome: 'provisioned', binary_version: '0.21.2.1', keys: { captured: ['wallet_seed'] } })
      await h.untilHealthy(node.id, 'the litecoin node to be healthy')
      return { id: node.id, userId }
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

