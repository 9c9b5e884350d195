/**
 * An agent flapping its node's sync_status through real heartbeats over gRPC with TLS
 * (docs/health.md, "Sync flapping"), on both databases: the gateway admits a bounded number of
 * changes per window, then holds the node's sync_status and raises one `sync_flapping` incident
 * instead of a health event per flap; changes are admitted again once the window has passed.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { AgentClient, CommandRunner } from '../../../src/node-agent/client.js'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import type { Db } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { healthEventSubject } from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startClient, startGateway, type RunningGateway } from './harness.js'

const runner: CommandRunner = { execute: async () => ({}) }
const LIMIT = { maxChanges: 6, windowMs: 10 * 60_000 }

describe.each(DIALECTS)('sync flapping through the agent-gateway on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway | undefined
  let client: AgentClient | undefined

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => {
    await client?.stop()
    await gateway?.stop()
    client = undefined
    gateway = undefined
  })
  afterAll(async () => {
    await t.destroy()
  })

  async function syncEvents(nodeId: string): Promise<string[]> {
    const rows = (await db('outbox').where({ subject: healthEventSubject(nodeId) }).orderBy('id')) as Array<{ payload: unknown }>
    return rows.map((r) => fromJson<{ dimension: string; to: string }>(r.payload)).filter((e) => e.dimension === 'sync_status').map((e) => e.to)
  }

  it('40 flaps give a bounded number of health events and one flapping incident; the window passing admits changes again', async () => {
    let clock = Date.now()
    gateway = await startGateway(db, { syncChangeLimit: LIMIT, now: () => new Date(clock) })
    const node = await insertTestNode(db)
    const started = startClient(gateway.target, node.id, await createAgentToken(db, node.id), runner)
    client = started.client
    await client.start()

    for (let i = 0; i < 40; i++) {
      const status = i % 2 === 0 ? 'synced' : 'syncing'
      started.host.state.sync_status = status
      // Each flap reaches the gateway in a real heartbeat (agent_status records what the agent said).
      await waitFor(async () => (await db('agent_status').where({ node_id: node.id }).first())?.sync_status === status, `flap ${i + 1} heartbeat`)
    }

    const incident = await waitFor(async () => db('incidents').where({ node_id: node.id, category: 'sync_flapping' }).first(), 'the flapping incident')
    expect(incident).toMatchObject({ status: 'open', severity: 'warning', occurrence_count: 1 })
    // unknown -> syncing at the first heartbeat, then five flaps: six changes admitted, no more.
    const events = await syncEvents(node.id)
    expect(events).toEqual(['syncing', 'synced', 'syncing', 'synced', 'syncing', 'synced'])
    expect((await findNode(db, node.id))?.sync_status).toBe('synced')
    expect(await db('incidents').where({ node_id: node.id }).count({ n: '*' }).first()).toMatchObject({ n: expect.anything() })
    expect(Number(((await db('incidents').where({ node_id: node.id }).count({ n: '*' }).first()) as { n: number | string }).n)).toBe(1)

    // The window ends: the agent's current report is recorded again.
    started.host.state.sync_status = 'syncing'
    clock += LIMIT.windowMs
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'syncing', 'sync change admitted after the window')
    expect(await syncEvents(node.id)).toHaveLength(7)
  })
})
