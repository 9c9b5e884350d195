import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import type { NodeState } from '../../src/nodes/states.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'

const HIDDEN = ['provider', 'instance_type', 'host_id', 'host_ip', 'region']

/**
 * `node list|show` over the API against one `nodeplane up`. The nodes are written straight into
 * the stack's database (no provisioning): the commands are what is under test here.
 */
describe('node commands (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  let aliceEnv: Record<string, string>
  let alice: { critical: string; failed: string; fresh: string; subscription: string }
  let strangersNode: string

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  async function node(userId: string, at: Date, state: NodeState, extra: Record<string, unknown> = {}): Promise<{ id: string; subscription: string }> {
    const subscription = await insertSubscription(db, userId, at)
    const { id } = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'process' }, at)
    await db('nodes')
      .where({ id })
      .update({ state, host_id: 'host-internal-1', host_ip: '10.1.2.3', ...extra })
    return { id, subscription }
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: await upPorts() })
    const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const user = await run(['user', 'create', '--email', 'alice@example.test', '--json'])
    expect(user.exitCode, user.stderr).toBe(0)
    const aliceId = json<{ id: string }>(user).id
    const issued = await run(['api-key', 'issue', '--user', aliceId, '--name', 'reader', '--scopes', 'nodes:read', '--json'])
    expect(issued.exitCode, issued.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }

    db = createDatabase(stack.database_url)
    const t0 = Date.now() - 60_000
    // The stack's health evaluator judges nodes by their agents' reports: this one reports its RPC
    // down (critical by devnet's policy). Its heartbeat and report are dated ahead, so they stay
    // fresh however long the test runs.
    const ahead = new Date(Date.now() + 3_600_000)
    const critical = await node(aliceId, new Date(t0), 'healthy', { sync_status: 'synced', application_health: 'critical', last_heartbeat: ahead })
    await db('agent_status').insert({
      node_id: critical.id,
      reported_at: ahead,
      agent_version: '0.1.0',
      binary_version: '1.1.0',
      sync_status: 'synced',
      process_state: 'running',
      restarts_in_window: 0,
      metrics: JSON.stringify({ rpc_up: 0 }),
      running_command_ids: JSON.stringify([]),
    })
    const failed = await node(aliceId, new Date(t0 + 1000), 'failed')
    const fresh = await node(aliceId, new Date(t0 + 2000), 'provisioning')
    await db('node_config_state').insert({ node_id: critical.id, binary_version: '1.1.0', config_version: null, updated_at: new Date() })
    alice = { critical: critical.id, failed: failed.id, fresh: fresh.id, subscription: failed.subscription }
    strangersNode = (await node(await insertUser(db), new Date(t0 + 3000), 'failed')).id
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('lists your nodes newest first, with filters and --limit; an admin key lists everyone', { timeout: 90_000 }, async () => {
    const listed = await run(['node', 'list', '--json'], aliceEnv)
    expect(listed.exitCode, listed.stderr).toBe(0)
    const nodes = json<{ nodes: Array<Record<string, unknown>> }>(listed).nodes
    expect(nodes.map((n) => n.id)).toEqual([alice.fresh, alice.failed, alice.critical])
    expect(nodes[2]).toMatchObject({ state: 'healthy', application_health: 'critical', sync_status: 'synced', display_state: 'critical', binary_version: '1.1.0', last_heartbeat: expect.any(String) })
    for (const n of nodes) for (const field of HIDDEN) expect(n).not.toHaveProperty(field)
    expect(listed.stdout).not.toContain('10.1.2.3')

    const limited = json<{ nodes: Array<{ id: string }> }>(await run(['node', 'list', '--limit', '2', '--json'], aliceEnv)).nodes
    expect(limited.map((n) => n.id)).toEqual([alice.fresh, alice.failed])
    const failed = json<{ nodes: Array<{ id: string }> }>(await run(['node', 'list', '--state', 'failed', '--json'], aliceEnv)).nodes
    expect(failed.map((n) => n.id)).toEqual([alice.failed])
    const bySubscription = json<{ nodes: Array<{ id: string }> }>(await run(['node', 'list', '--subscription', alice.subscription, '--json'], aliceEnv)).nodes
    expect(bySubscription.map((n) => n.id)).toEqual([alice.failed])

    // No NODEPLANE_API_KEY: the stack's admin key, which sees every node.
    const all = json<{ nodes: Array<{ id: string }> }>(await run(['node', 'list', '--json'])).nodes.map((n) => n.id)
    expect(all).toEqual(expect.arrayContaining([strangersNode, alice.fresh, alice.failed, alice.critical]))

    const table = await run(['node', 'list'], aliceEnv)
    expect(table.exitCode).toBe(0)
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines).toHaveLength(2 + 3)
    expect(lines[0]).toMatch(/^ID\s+CHAIN\s+TYPE\s+VERSION\s+DISPLAY STATE\s+STATE\s+SYNC\s+APP HEALTH\s+LAST HEARTBEAT$/)
    // Its heartbeat is dated an hour ahead (above): the age says so, to the second.
    expect(lines[4]).toMatch(new RegExp(`^${alice.critical}\\s+devnet\\s+full\\s+1\\.1\\.0\\s+critical\\s+healthy\\s+synced\\s+critical\\s+in (59m\\d+s|1h)$`))
    expect(lines[3]).toMatch(/\sfailed\s+failed\s+unknown\s+unknown\s+never$/)

    const badState = await run(['node', 'list', '--state', 'sleeping'], aliceEnv)
    expect(badState.exitCode).toBe(2)
    const badSubscription = await run(['node', 'list', '--subscription', 'nope'], aliceEnv)
    expect(badSubscription.exitCode).toBe(2)
    expect(badSubscription.stderr).toContain('query.subscription_id')
  })

  it("shows one node; an unknown id or another user's node exits 3 with one line and a hint", { timeout: 90_000 }, async () => {
    const shown = await run(['node', 'show', '--id', alice.critical, '--json'], aliceEnv)
    expect(shown.exitCode, shown.stderr).toBe(0)
    const listed = json<{ nodes: Array<{ id: string }> }>(await run(['node', 'list', '--json'], aliceEnv)).nodes
    expect(json(shown)).toEqual(listed.find((n) => n.id === alice.critical))

    const human = await run(['node', 'show', '--id', alice.critical], aliceEnv)
    expect(human.stdout).toContain(`devnet full node ${alice.critical}`)
    expect(human.stdout).toMatch(/display state:\s+critical/)
    expect(human.stdout).toMatch(/binary version:\s+1\.1\.0/)

    for (const id of ['00000000-0000-4000-8000-000000000000', strangersNode, 'not-a-node-id']) {
      const missing = await run(['node', 'show', '--id', id], aliceEnv)
      expect(missing.exitCode, id).toBe(3)
      const lines = missing.stderr.trim().split('\n')
      expect(lines[0]).toBe(`Error: no node ${id} among the nodes you can see`)
      expect(lines.length).toBeLessThanOrEqual(2)
    }
    const asJson = await run(['node', 'show', '--id', strangersNode, '--json'], aliceEnv)
    expect(asJson.exitCode).toBe(3)
    expect(json<{ error: { name: string; exit_code: number } }>(asJson).error).toMatchObject({ name: 'NotFoundError', exit_code: 3 })

    // The admin key sees the stranger's node.
    const asAdmin = await run(['node', 'show', '--id', strangersNode, '--json'])
    expect(asAdmin.exitCode).toBe(0)
    expect(json(asAdmin)).toMatchObject({ id: strangersNode, state: 'failed', display_state: 'failed' })
  })
})
