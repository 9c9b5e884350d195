/**
 * A node's recorded sync_status written behind its connected agent's back (an old stream's late
 * write after a migration, another gateway) is put back to what the agent reports: the gateway
 * compares agent_status with nodes at each token recheck, on both databases, over real gRPC.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import type { AgentClient, CommandRunner } from '../../../src/node-agent/client.js'
import { applyHealthUpdate } from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startClient, startGateway, type RunningGateway } from './harness.js'

const runner: CommandRunner = { execute: async () => ({}) }

describe.each(DIALECTS)('sync_status reconciled by the agent-gateway on %s', (dialect) => {
  let t: TestDatabase
  let gateway: RunningGateway | undefined
  let client: AgentClient | undefined

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
  })
  afterEach(async () => {
    await client?.stop()
    await gateway?.stop()
  })
  afterAll(async () => {
    await t.destroy()
  })

  it('a sync_status another writer left behind is written back to what the connected agent reports', async () => {
    gateway = await startGateway(t.db, { tokenRecheckMs: 100 })
    const node = await insertTestNode(t.db)
    const started = startClient(gateway.target, node.id, await createAgentToken(t.db, node.id), runner)
    client = started.client
    started.host.state.sync_status = 'synced'
    await client.start()
    await waitFor(async () => (await findNode(t.db, node.id))?.sync_status === 'synced', 'synced recorded')

    // What a late write of the node's previous agent (its chain stopped) does.
    await t.db.transaction((trx) => applyHealthUpdate(trx, { nodeId: node.id, change: { writer: 'sync_event', sync_status: 'unknown' }, reason: 'agent reported unknown', now: new Date() }))
    expect((await findNode(t.db, node.id))?.sync_status).toBe('unknown')

    // The agent keeps reporting synced, which this stream already forwarded once.
    await waitFor(async () => (await findNode(t.db, node.id))?.sync_status === 'synced', 'synced written back', 10_000, 50)
  })
})
