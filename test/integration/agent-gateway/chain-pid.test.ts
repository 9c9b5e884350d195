/**
 * The chain process's pid travels from the agent's supervisor through its heartbeat to the
 * database (issue 22, item 8): a real supervisor runs a real chain stand-in, a real agent client
 * reports it over gRPC to a real gateway. Operators read it (`findOperatorNodeView`, behind
 * `node show --wide`); the customer's view of the node never carries it.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { AgentClient } from '../../../src/node-agent/client.js'
import { HostReporter } from '../../../src/node-agent/host.js'
import type { StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor } from '../../../src/node-agent/supervisor.js'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import { findOperatorNodeView } from '../../../src/nodes/operator-view.js'
import { findNodeView } from '../../../src/nodes/views.js'
import { activateFixture, killAll, removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startClient, startGateway, type RunningGateway } from './harness.js'

describe.each(DIALECTS)('chain pid in heartbeats on %s', (dialect) => {
  let t: TestDatabase | undefined
  let gateway: RunningGateway | undefined
  let client: AgentClient | undefined
  let supervisor: ChainSupervisor | undefined
  let dir: StateDir | undefined
  const pids = new Set<number>()

  afterEach(async () => {
    await client?.stop()
    await gateway?.stop()
    await supervisor?.close()
    killAll(pids)
    removeStateDir(dir)
    await t?.destroy()
    client = gateway = supervisor = dir = t = undefined
    pids.clear()
  })

  it("records the running chain process's pid for operators, never in the customer's view, and clears it when the chain stops", async () => {
    t = await createTestDatabase(dialect)
    const db = t.db
    gateway = await startGateway(db)
    const node = await insertTestNode(db)
    const token = await createAgentToken(db, node.id)

    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    supervisor = new ChainSupervisor({ stateDir: dir, logger: silentLogger, settleMs: 100, stopGraceMs: 2_000 })
    await supervisor.start()
    const pid = supervisor.status().pid
    expect(pid).toEqual(expect.any(Number))
    pids.add(pid!)

    client = startClient(gateway.target, node.id, token, { execute: () => Promise.resolve({}) }, { host: new HostReporter(dir, supervisor) }).client
    await client.start()
    const seen = await waitFor(async () => {
      const view = await findOperatorNodeView(db, node.id)
      return view?.agent.chain_pid !== null ? view : undefined
    }, 'the heartbeat with the chain pid')
    expect(seen?.agent).toMatchObject({ chain_pid: pid, process_state: 'running', agent_version: '0.1.0-test', reported_at: expect.any(String) })

    const owner = (await db('subscriptions').where({ id: node.subscription_id }).first('user_id')) as { user_id: string }
    const customers = await findNodeView(db, { kind: 'owner', userId: owner.user_id }, node.id)
    expect(customers).toBeDefined()
    expect(JSON.stringify(customers)).not.toContain('pid')
    expect(JSON.stringify(await findNodeView(db, { kind: 'all' }, node.id))).not.toContain('pid')

    await supervisor.stop()
    const stopped = await waitFor(async () => {
      const view = await findOperatorNodeView(db, node.id)
      return view?.agent.process_state === 'stopped' ? view : undefined
    }, 'a heartbeat of the stopped chain')
    expect(stopped?.agent.chain_pid).toBeNull()
  })

  it('shows no agent report for a node whose agent never reported, and nothing for an unknown node', async () => {
    t = await createTestDatabase(dialect)
    const node = await insertTestNode(t.db)
    expect((await findOperatorNodeView(t.db, node.id))?.agent).toEqual({ reported_at: null, agent_version: null, process_state: null, chain_pid: null, restarts_in_window: null })
    expect(await findOperatorNodeView(t.db, '00000000-0000-4000-8000-000000000000')).toBeUndefined()
  })
})
