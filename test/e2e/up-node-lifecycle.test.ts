import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { insertSubscription } from '../helpers/fixtures.js'
import { waitFor } from '../helpers/ports.js'

/**
 * On a laptop a node really comes up: `nodeplane up`, then `node provision` starts a real node
 * agent and devnet-node on the local provider; the health evaluation takes it from syncing to
 * healthy with its application health ok; when its host dies (agent and chain killed) the node
 * goes down, a node_down incident opens, the node is migrated to a new host by itself and the
 * incident resolves itself; `node terminate` removes it. Short
 * heartbeat timeout, grace and evaluation interval so this takes seconds. (The subscription is
 * written into the stack's database: the payment journey tests buy one.)
 */
describe('a node on nodeplane up (local provider, real agent and devnet-node)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  let stack: StackFile

  const run = (args: string[]): Promise<CliResult> => nodeplane(args, { cwd: dir })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], {
      cwd: dir,
      env: { ...(await upPorts()), AGENT_HEARTBEAT_INTERVAL: '1s', HEALTH_EVALUATION_INTERVAL: '1s', HEARTBEAT_TIMEOUT: '5s', MIGRATION_GRACE: '2s', AGENT_FENCE_TIMEOUT: '6s' },
    })
    stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
    db = createDatabase(stack.database_url)
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('provisions, becomes healthy, heals by migration when its host dies, and terminates with its host removed', { timeout: 240_000 }, async () => {
    expect(fs.statSync(path.join(dir, '.nodeplane', 'master.key')).mode & 0o777).toBe(0o600)
    const operator = (await db('users').where({ email: 'operator@localhost' }).first()) as { id: string }
    const subscription = await insertSubscription(db, operator.id)
    const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })

    const provision = await run(['node', 'provision', '--node', node.id, '--json'])
    expect(provision.exitCode, provision.stderr).toBe(0)
    expect(json<{ created: boolean; workflow: string }>(provision)).toMatchObject({ created: true, workflow: 'provision' })
    const again = await run(['node', 'provision', '--node', node.id, '--json'])
    expect(json<{ created: boolean; run_id: string }>(again)).toMatchObject({ created: false, run_id: json<{ run_id: string }>(provision).run_id })

    interface NodeView {
      state: string
      sync_status: string
      application_health: string
      binary_version: string | null
      display_state: string
    }
    const show = async (): Promise<NodeView | undefined> => {
      const result = await run(['node', 'show', '--id', node.id, '--json'])
      return result.exitCode === 0 ? json<NodeView>(result) : undefined
    }
    const healthy = () =>
      waitFor(async () => {
        const view = await show()
        return view?.state === 'healthy' && view.application_health === 'ok' ? view : undefined
      }, 'node show: healthy with application health ok', 90_000, 250)
    expect(await healthy()).toMatchObject({ sync_status: 'synced', binary_version: '1.0.0', display_state: 'healthy' })
    const hosts = path.join(dir, '.nodeplane', 'hosts')
    expect(fs.readdirSync(hosts)).toEqual([`local-${node.id}`])
    const moves = async () =>
      ((await db('outbox').where({ subject: `events.node.${node.id}.health_changed` }).orderBy('id').pluck('payload')) as unknown[])
        .map((p) => (typeof p === 'string' ? JSON.parse(p) : p) as { dimension: string; to: string; writer: string })
        .filter((e) => e.dimension === 'state')
        .map((e) => `${e.writer}:${e.to}`)
    expect(await moves()).toEqual(['provisioning:syncing', 'heartbeat_evaluation:healthy'])

    // The host dies: its agent's process group (agent and devnet-node) is killed.
    const record = JSON.parse(fs.readFileSync(path.join(hosts, `local-${node.id}`, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-record.pid, 'SIGKILL')
    await waitFor(async () => (await moves()).includes('heartbeat_evaluation:down'), 'the node to be marked down', 60_000, 250)
    // Down past the grace: migrated to a new host, which comes up healthy; the old host is gone.
    await waitFor(async () => (await moves()).includes('migration:maintenance'), 'the migration to start', 60_000, 250)
    const back = await healthy()
    expect(back.binary_version).toBe('1.0.0')
    const [newHost] = fs.readdirSync(hosts)
    expect(fs.readdirSync(hosts)).toHaveLength(1)
    expect(newHost).toMatch(new RegExp(`^local-${node.id}-m\\d+$`))
    expect(await moves()).toEqual([
      'provisioning:syncing',
      'heartbeat_evaluation:healthy',
      'heartbeat_evaluation:down',
      'migration:maintenance',
      'migration:syncing',
      'heartbeat_evaluation:healthy',
    ])

    // The outage raised one node_down incident for the node's owner, which resolved itself after
    // the node was healthy for the debounce (3 cycles).
    interface IncidentView {
      category: string
      severity: string
      status: string
      node_id: string
      resolved_by: string | null
    }
    const incidents = async () => json<{ incidents: IncidentView[] }>(await run(['incident', 'list', '--node', node.id, '--json'])).incidents
    let seen: IncidentView[] = []
    const resolved = await waitFor(async () => {
      // One incident for the outage: the new chain not answering its probe while it starts
      // raises none of its own (its agent reports it `starting`; docs/health.md).
      const list = (seen = await incidents())
      return list.length === 1 && list[0]?.category === 'node_down' && list[0].status === 'auto_resolved' ? list : undefined
    }, 'the node_down incident to auto-resolve', 90_000, 250).catch(async (err: Error) => {
      throw new Error(`${err.message}; incidents ${JSON.stringify(seen)}; state moves ${JSON.stringify(await moves())}`)
    })
    expect(resolved[0]).toMatchObject({ category: 'node_down', severity: 'critical', node_id: node.id })

    // Its subscription is active: the operator ends it with the node (alone it is refused, exit 4).
    const terminate = await run(['node', 'terminate', '--node', node.id, '--end-subscription', '--yes', '--json'])
    expect(terminate.exitCode, terminate.stderr).toBe(0)
    await waitFor(async () => json<{ state: string }>(await run(['node', 'show', '--id', node.id, '--json'])).state === 'terminated', 'terminated', 60_000, 500)
    expect(fs.readdirSync(hosts)).toEqual([])

    const unknown = await run(['node', 'provision', '--node', '0190f5c2-0000-7000-8000-000000000000'])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: node 0190f5c2-0000-7000-8000-000000000000 not found/)
  })
})
