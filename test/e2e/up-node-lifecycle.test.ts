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
 * agent and devnet-node on the local provider; `node show` reports it; `node terminate` removes it.
 * (The subscription is written into the stack's database: subscriptions and payments are
 * another issue.)
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
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), AGENT_HEARTBEAT_INTERVAL: '1s' } })
    stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
    db = createDatabase(stack.database_url)
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('provisions, reports syncing then synced, and terminates with its host removed', { timeout: 120_000 }, async () => {
    expect(fs.statSync(path.join(dir, '.nodeplane', 'master.key')).mode & 0o777).toBe(0o600)
    const operator = (await db('users').where({ email: 'operator@localhost' }).first()) as { id: string }
    const subscription = await insertSubscription(db, operator.id)
    const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })

    const provision = await run(['node', 'provision', '--node', node.id, '--json'])
    expect(provision.exitCode, provision.stderr).toBe(0)
    expect(json<{ created: boolean; workflow: string }>(provision)).toMatchObject({ created: true, workflow: 'provision' })
    const again = await run(['node', 'provision', '--node', node.id, '--json'])
    expect(json<{ created: boolean; run_id: string }>(again)).toMatchObject({ created: false, run_id: json<{ run_id: string }>(provision).run_id })

    const shown = await waitFor(async () => {
      const result = await run(['node', 'show', '--id', node.id, '--json'])
      const view = result.exitCode === 0 ? json<{ state: string; sync_status: string; binary_version: string | null; display_state: string }>(result) : undefined
      return view?.state === 'syncing' && view.sync_status === 'synced' ? view : undefined
    }, 'node show: syncing and synced', 90_000, 500)
    expect(shown).toMatchObject({ binary_version: '1.0.0', display_state: 'syncing' })
    const hosts = path.join(dir, '.nodeplane', 'hosts')
    expect(fs.readdirSync(hosts)).toEqual([`local-${node.id}`])

    const terminate = await run(['node', 'terminate', '--node', node.id, '--json'])
    expect(terminate.exitCode, terminate.stderr).toBe(0)
    await waitFor(async () => json<{ state: string }>(await run(['node', 'show', '--id', node.id, '--json'])).state === 'terminated', 'terminated', 60_000, 500)
    expect(fs.readdirSync(hosts)).toEqual([])

    const unknown = await run(['node', 'provision', '--node', '0190f5c2-0000-7000-8000-000000000000'])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: node 0190f5c2-0000-7000-8000-000000000000 not found/)
  })
})
