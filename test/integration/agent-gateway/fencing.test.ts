/**
 * The gateway's part of fencing (docs/node-agent.md, "Fencing"), over real gRPC with TLS on both
 * databases: heartbeats are acknowledged once committed, and only on the node's current stream;
 * an open stream whose token a migration replaced (or that was revoked, or whose node retired) is
 * closed with the refusal by the gateway's recheck, so the agent learns it was superseded and gets
 * no more acknowledgements.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { AgentClient, CommandRunner } from '../../../src/node-agent/client.js'
import { createAgentToken, revokeAgentToken } from '../../../src/agent-gateway/tokens.js'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { toDate } from '../../../src/db/dialect.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startClient, startGateway, type RunningGateway } from './harness.js'

const runner: CommandRunner = { execute: async () => null }
const RECHECK_MS = 100

describeEachDialectConcurrently('the agent-gateway fencing on %s', (dialect) => {
  let t: TestDatabase
  let gateway: RunningGateway
  const clients: AgentClient[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    gateway = await startGateway(t.db, { tokenRecheckMs: RECHECK_MS })
  })
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.stop()))
    await gateway?.stop()
    await t?.destroy()
  })

  async function connected(nodeId: string, token: string) {
    const contacts: number[] = []
    const started = startClient(gateway.target, nodeId, token, runner, { onContact: (at) => contacts.push(at) })
    clients.push(started.client)
    await started.client.start()
    return { ...started, contacts }
  }

  it('acknowledges the heartbeats of a connected agent: the stream opening and each acknowledgement are its contacts, in order', async () => {
    const node = await insertTestNode(t.db)
    const agent = await connected(node.id, await createAgentToken(t.db, node.id))
    await waitFor(async () => agent.client.heartbeatsAcknowledged >= 5, 'five acknowledgements')
    const row = (await t.db('nodes').where({ id: node.id }).first('last_heartbeat')) as { last_heartbeat: unknown }
    expect(toDate(row.last_heartbeat).getTime()).toBeGreaterThan(0)
    // The stream opening and every acknowledgement are contacts, in order.
    expect(agent.contacts.length).toBeGreaterThanOrEqual(6)
    expect([...agent.contacts].sort((a, b) => a - b)).toEqual(agent.contacts)
    expect(agent.fatal).toEqual([])
  })

  it('closes an open stream whose token was replaced with UNAUTHENTICATED, and acknowledges nothing after', async () => {
    const node = await insertTestNode(t.db)
    const agent = await connected(node.id, await createAgentToken(t.db, node.id))
    await waitFor(async () => agent.client.heartbeatsAcknowledged >= 2, 'acknowledgements')
    // What a migration's create-host step does while the old agent is still connected.
    await createAgentToken(t.db, node.id)
    await waitFor(async () => agent.fatal.length > 0, 'the agent refused on its open stream', 10_000, 20)
    expect(agent.fatal[0]).toMatch(/^UNAUTHENTICATED: agent token refused/)
    expect(agent.client.connected).toBe(false)
    const acknowledged = agent.client.heartbeatsAcknowledged
    await new Promise((resolve) => setTimeout(resolve, 4 * RECHECK_MS))
    expect(agent.client.heartbeatsAcknowledged).toBe(acknowledged)
    await waitFor(async () => (await findRegistration(t.db, node.id))?.disconnected_at, 'the disconnect recorded')
  })

  it('closes the streams of a revoked token and of a retired node, and leaves the others open', async () => {
    const [revoked, retired, kept] = await Promise.all([insertTestNode(t.db), insertTestNode(t.db), insertTestNode(t.db)])
    const agents = await Promise.all([revoked, retired, kept].map(async (n) => connected(n.id, await createAgentToken(t.db, n.id))))
    await waitFor(async () => agents.every((a) => a.client.heartbeatsAcknowledged >= 1), 'every agent acknowledged')
    await revokeAgentToken(t.db, revoked.id)
    await setNodeState(t.db, retired.id, 'terminated')
    await waitFor(async () => agents[0]!.fatal.length > 0 && agents[1]!.fatal.length > 0, 'both refused', 10_000, 20)
    expect(agents[0]!.fatal[0]).toMatch(/^UNAUTHENTICATED/)
    expect(agents[1]!.fatal[0]).toMatch(/^FAILED_PRECONDITION: node .* is terminated/)
    const before = agents[2]!.client.heartbeatsAcknowledged
    await waitFor(async () => agents[2]!.client.heartbeatsAcknowledged > before + 3, 'the third agent still acknowledged')
    expect(agents[2]!.fatal).toEqual([])
    expect(agents[2]!.client.connected).toBe(true)
  })
})
