/**
 * The endpoint as a health signal, on both databases: a real rpc-gateway in-process in front of a
 * small JSON-RPC node that can stop answering; the calls that time out for callers are counted in
 * rpc_upstream_health and the real policy evaluation turns them into the node's
 * application_health (critical, with the reason in its health event), while the agent's own
 * report says all is well. Then the node answers again and a new window puts it back to ok.
 */
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue, type ChainCatalogue } from '../../../src/config/chains.js'
import { DEFAULT_HEALTH_POLICY } from '../../../src/config/health-policy.js'
import { toJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { evaluatePolicies } from '../../../src/health/policy-evaluation.js'
import { createLogger } from '../../../src/log.js'
import { addUpstreamCounts, UPSTREAM_HEALTH_WINDOW_MS, windowStart } from '../../../src/rpc-gateway/upstream-health.js'
import { DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { gatewaySettings, insertServingNode, post } from '../../helpers/rpc-gateway-fixtures.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { Resources } from '../http/harness.js'
import { at, healthEvents } from '../health/support.js'

const logger = createLogger({ level: 'silent' })
const CHAIN = 'ethereum-anvil'

/** A node that answers every call, or none while `silent` (its callers time out). */
async function startNode(): Promise<{ port: number; silent: boolean; close(): Promise<void> }> {
  const state = { silent: false }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (state.silent) return
      const call = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: unknown }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: '0x1' }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return Object.assign(state, {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  })
}

describe.each(DIALECTS)('what callers of the endpoint see feeds the node health on %s', (dialect) => {
  const resources = new Resources()
  let t: TestDatabase
  let gateway: RunningRpcGateway
  let node: Awaited<ReturnType<typeof startNode>>
  let catalogue: ChainCatalogue
  let ownerId: string
  let rpcKey: string
  // The gateway's and the evaluation's clock.
  let clock = 0
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-rpc-upstream-'))

  beforeAll(async () => {
    t = await resources.database(dialect)
    node = await startNode()
    resources.add(() => node.close())
    resources.add(async () => fs.rmSync(tmp, { recursive: true, force: true }))
    const loaded = await loadChainCatalogue(defaultConfigDir())
    // The profile's own rules judge metrics these tests do not report; only the endpoint is judged here.
    const profiles = new Map(loaded.profiles)
    profiles.set(CHAIN, { ...loaded.profiles.get(CHAIN)!, health_policy: DEFAULT_HEALTH_POLICY })
    catalogue = { ...loaded, profiles }
    gateway = await startRpcGateway(gatewaySettings(tmp, { RPC_GATEWAY_UPSTREAM_TIMEOUT: 200 }), {
      db: t.db,
      logger,
      chains: staticChainSource(catalogue),
      usageFlushMs: 50,
      now: () => at(clock),
    })
    resources.add(() => gateway.stop())
    ownerId = (await newUser(t.db)).id
    rpcKey = (await newKey(t.db, ownerId, { scopes: ['nodes:rpc'] })).key
  }, 60_000)

  afterAll(() => resources.cleanup())

  /** A serving node whose agent reports a running chain, fresh at `clock`. */
  async function servingNode(db: Db, name: string): Promise<string> {
    const id = await insertServingNode(db, ownerId, CHAIN, 'full', `local-${name}`, node.port)
    await db('nodes').where({ id }).update({ state_changed_at: at(clock - 60_000), application_health: 'ok' })
    await db('agent_status').insert({
      node_id: id,
      reported_at: at(clock - 1_000),
      agent_version: '0.1.0',
      binary_version: '1.7.1',
      sync_status: 'synced',
      process_state: 'running',
      restarts_in_window: 0,
      metrics: toJson({ rpc_up: 1, block_height: 10 }),
      running_command_ids: toJson([]),
    })
    return id
  }

  const call = (nodeId: string, i: number) =>
    post(`${gateway.url}/v1/${nodeId}`, { jsonrpc: '2.0', id: i, method: 'eth_getBalance', params: [`0x${String(i).padStart(40, '0')}`, 'latest'] }, { 'X-API-Key': rpcKey })
  const evaluate = () => evaluatePolicies(t.db, { now: at(clock), catalogue, reportMaxAgeMs: 60_000, logger })
  const counts = async (nodeId: string) =>
    (await t.db('rpc_upstream_health').where({ node_id: nodeId }).first('window_start_ms', 'answered', 'failed')) as { window_start_ms: number | string; answered: number | string; failed: number | string } | undefined
  const health = async (nodeId: string) => ((await t.db('nodes').where({ id: nodeId }).first('application_health')) as { application_health: string }).application_health

  it('calls timing out for callers turn a node critical whose agent reports it running; answered again in a new window, it is ok', async () => {
    clock = 0
    const nodeId = await servingNode(t.db, 'times-out')
    node.silent = true
    const answers = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => call(nodeId, i)))
    expect(answers.map((a) => a.status)).toEqual([504, 504, 504, 504, 504, 504])
    await waitFor(async () => Number((await counts(nodeId))?.failed ?? 0) === 6, 'six failed calls written', 10_000, 25)
    expect(Number((await counts(nodeId))!.answered)).toBe(0)

    const judged = await evaluate()
    expect(judged.changes).toContainEqual({ node_id: nodeId, from: 'ok', to: 'critical' })
    const events = await healthEvents(t.db, nodeId)
    expect(events.at(-1)).toMatchObject({ writer: 'policy_evaluation', dimension: 'application_health', to: 'critical' })
    expect(JSON.stringify(events.at(-1))).toContain('rpc_upstream_failure_ratio 1 (critical above 0.5)')

    // The node answers again; a minute later its calls make a new window that replaces the old one.
    node.silent = false
    clock = UPSTREAM_HEALTH_WINDOW_MS
    await t.db('agent_status').where({ node_id: nodeId }).update({ reported_at: at(clock - 1_000) })
    const again = await Promise.all([11, 12, 13, 14, 15].map((i) => call(nodeId, i)))
    expect(again.map((a) => a.status)).toEqual([200, 200, 200, 200, 200])
    await waitFor(async () => Number((await counts(nodeId))?.answered ?? 0) === 5, 'five answered calls written', 10_000, 25)
    expect(Number((await counts(nodeId))!.failed)).toBe(0)
    expect((await evaluate()).changes).toContainEqual({ node_id: nodeId, from: 'critical', to: 'ok' })
  })

  it('judges no node on fewer than five calls, or on a window older than the last one', async () => {
    clock = 10 * UPSTREAM_HEALTH_WINDOW_MS
    const few = await servingNode(t.db, 'few-calls')
    node.silent = true
    expect((await Promise.all([21, 22, 23].map((i) => call(few, i)))).map((a) => a.status)).toEqual([504, 504, 504])
    node.silent = false
    await waitFor(async () => Number((await counts(few))?.failed ?? 0) === 3, 'three failed calls written', 10_000, 25)
    const stale = await servingNode(t.db, 'stale-window')
    await addUpstreamCounts(t.db, [{ nodeId: stale, windowStartMs: windowStart(at(clock).getTime()) - 2 * UPSTREAM_HEALTH_WINDOW_MS, answered: 0, failed: 50 }])
    const judged = await evaluate()
    expect(judged.changes.map((c) => c.node_id)).not.toContain(few)
    expect(judged.changes.map((c) => c.node_id)).not.toContain(stale)
    expect(await health(few)).toBe('ok')
    expect(await health(stale)).toBe('ok')
  })

  it('gateways add to one row per node and window: summed within it, replaced by a newer one, never by an older one', async () => {
    const nodeId = await servingNode(t.db, 'shared-row')
    const w = windowStart(at(20 * UPSTREAM_HEALTH_WINDOW_MS).getTime())
    await addUpstreamCounts(t.db, [{ nodeId, windowStartMs: w, answered: 3, failed: 1 }])
    await addUpstreamCounts(t.db, [{ nodeId, windowStartMs: w, answered: 2, failed: 4 }])
    const read = async () => {
      const row = (await counts(nodeId))!
      return { window: Number(row.window_start_ms), answered: Number(row.answered), failed: Number(row.failed) }
    }
    expect(await read()).toEqual({ window: w, answered: 5, failed: 5 })
    // A gateway late with the window before: dropped.
    await addUpstreamCounts(t.db, [{ nodeId, windowStartMs: w - UPSTREAM_HEALTH_WINDOW_MS, answered: 100, failed: 100 }])
    expect(await read()).toEqual({ window: w, answered: 5, failed: 5 })
    // The next window starts afresh.
    await addUpstreamCounts(t.db, [{ nodeId, windowStartMs: w + UPSTREAM_HEALTH_WINDOW_MS, answered: 7, failed: 0 }])
    expect(await read()).toEqual({ window: w + UPSTREAM_HEALTH_WINDOW_MS, answered: 7, failed: 0 })
  })
})
