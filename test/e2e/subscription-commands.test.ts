import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'
import { waitFor } from '../helpers/ports.js'

const HIDDEN = ['provider', 'region', 'instance_type']

interface Subscription {
  id: string
  status: string
  [key: string]: unknown
}

/** `subscription create|list|show` over the API against one `nodeplane up`. */
describe('subscription commands (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  let aliceEnv: Record<string, string>
  let aliceId: string
  let strangers: string

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: await upPorts() })
    const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const user = await run(['user', 'create', '--email', 'alice@example.test', '--json'])
    expect(user.exitCode, user.stderr).toBe(0)
    aliceId = json<{ id: string }>(user).id
    const issued = await run(['api-key', 'issue', '--user', aliceId, '--name', 'buyer', '--scopes', 'subscriptions:read,subscriptions:write', '--json'])
    expect(issued.exitCode, issued.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }

    db = createDatabase(stack.database_url)
    strangers = await insertSubscription(db, await insertUser(db), new Date(Date.now() - 60_000))
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('creates a subscription, then returns the equal pending one; bad values exit 2 naming the allowed ones', { timeout: 90_000 }, async () => {
    const created = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', '1m', '--json'], aliceEnv)
    expect(created.exitCode, created.stderr).toBe(0)
    const first = json<Subscription & { created: boolean }>(created)
    expect(first).toMatchObject({ user_id: aliceId, chain_profile_id: 'devnet', node_type: 'full', duration: '1m', status: 'pending_payment', payment_id: null, created: true })
    for (const field of HIDDEN) expect(first).not.toHaveProperty(field)

    const again = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', '1m', '--json'], aliceEnv)
    expect(again.exitCode, again.stderr).toBe(0)
    expect(json(again)).toEqual({ ...first, created: false })

    const human = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', '1m'], aliceEnv)
    expect(human.stdout).toContain(`You already have devnet full subscription ${first.id} (1m) pending payment`)
    const fresh = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'archive', '--duration', '1w'], aliceEnv)
    expect(fresh.stdout).toMatch(/^Created devnet archive subscription [0-9a-f-]{36} \(1w\), pending payment\.$/m)

    const badType = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'validator', '--duration', '1m'], aliceEnv)
    expect(badType.exitCode).toBe(2)
    expect(badType.stderr).toContain('full, archive')
    const badChain = await run(['subscription', 'create', '--chain', 'nochain', '--node-type', 'full', '--duration', '1m', '--json'], aliceEnv)
    expect(badChain.exitCode).toBe(2)
    expect(json<{ error: { name: string; message: string; details: string } }>(badChain).error.name).toBe('ValidationError')
    expect(badChain.stdout).toContain('devnet')
    const badDuration = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', '2m'], aliceEnv)
    expect(badDuration.exitCode).toBe(2)
  })

  it('lists your subscriptions newest first, with --status and --limit; shows one; another user\'s exits 3', { timeout: 90_000 }, async () => {
    await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', '3m', '--json'], aliceEnv)
    const listed = await run(['subscription', 'list', '--json'], aliceEnv)
    expect(listed.exitCode, listed.stderr).toBe(0)
    const subscriptions = json<{ subscriptions: Subscription[] }>(listed).subscriptions
    expect(subscriptions.length).toBeGreaterThanOrEqual(1)
    expect(subscriptions.every((s) => s.user_id === aliceId)).toBe(true)
    expect(subscriptions[0]).toMatchObject({ duration: '3m' })
    for (const s of subscriptions) for (const field of HIDDEN) expect(s).not.toHaveProperty(field)
    const createdAt = subscriptions.map((s) => String(s.created_at))
    expect([...createdAt].sort().reverse()).toEqual(createdAt)

    const limited = json<{ subscriptions: Subscription[] }>(await run(['subscription', 'list', '--limit', '1', '--json'], aliceEnv)).subscriptions
    expect(limited.map((s) => s.id)).toEqual([subscriptions[0]?.id])
    expect(json<{ subscriptions: Subscription[] }>(await run(['subscription', 'list', '--status', 'active', '--json'], aliceEnv)).subscriptions).toEqual([])
    expect((await run(['subscription', 'list', '--status', 'sleeping'], aliceEnv)).exitCode).toBe(2)

    const table = await run(['subscription', 'list'], aliceEnv)
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^ID\s+CHAIN\s+TYPE\s+DURATION\s+STATUS\s+EXPIRES\s+CREATED$/)
    expect(lines).toHaveLength(2 + subscriptions.length)

    // No NODEPLANE_API_KEY: the stack's admin key sees everyone's.
    const all = json<{ subscriptions: Subscription[] }>(await run(['subscription', 'list', '--json'])).subscriptions.map((s) => s.id)
    expect(all).toEqual(expect.arrayContaining([strangers, ...subscriptions.map((s) => s.id)]))

    const one = subscriptions[0] as Subscription
    const shown = await run(['subscription', 'show', '--id', one.id, '--json'], aliceEnv)
    expect(shown.exitCode, shown.stderr).toBe(0)
    expect(json(shown)).toEqual(one)
    const human = await run(['subscription', 'show', '--id', one.id], aliceEnv)
    expect(human.stdout).toContain(`devnet full subscription ${one.id}`)
    expect(human.stdout).toMatch(/status:\s+pending_payment/)

    for (const id of ['00000000-0000-4000-8000-000000000000', strangers, 'not-an-id']) {
      const missing = await run(['subscription', 'show', '--id', id], aliceEnv)
      expect(missing.exitCode, id).toBe(3)
      expect(missing.stderr.trim().split('\n')[0]).toBe(`Error: no subscription ${id} among the subscriptions you can see`)
    }
    const asJson = await run(['subscription', 'show', '--id', strangers, '--json'], aliceEnv)
    expect(json<{ error: { name: string; exit_code: number } }>(asJson).error).toMatchObject({ name: 'NotFoundError', exit_code: 3 })
    expect((await run(['subscription', 'show', '--id', strangers, '--json'])).exitCode).toBe(0)
  })

  it('reprovision (operators): a new node for a paid subscription without one; a live node exits 4, unknown 3, a non-admin key 77', { timeout: 330_000 }, async () => {
    // Paid and active, its only node failed to provision (as the provision workflow leaves it).
    const now = new Date()
    const paid = await insertSubscription(db, await insertUser(db), now)
    const failedNode = '00000000-0000-4000-8000-0000000000f1'
    await db('nodes').insert({ id: failedNode, subscription_id: paid, chain_profile_id: 'devnet', node_type: 'full', state: 'failed', sync_status: 'unknown', application_health: 'unknown', consecutive_failures: 0, state_changed_at: now, version: 1, created_at: now, updated_at: now })

    const refused = await run(['subscription', 'reprovision', '--id', paid], aliceEnv)
    expect(refused.exitCode, refused.stderr).toBe(77)
    expect(refused.stderr.trim().split('\n')[0]).toMatch(/^Error: missing scope: /)

    const started = await run(['subscription', 'reprovision', '--id', paid, '--json'])
    expect(started.exitCode, started.stderr).toBe(0)
    const result = json<{ subscription_id: string; node_id: string; workflow_run_id: string; previous_node_id: string }>(started)
    expect(result).toMatchObject({ subscription_id: paid, previous_node_id: failedNode })
    expect(await db('nodes').where({ subscription_id: paid }).whereNot({ id: failedNode }).pluck('id')).toEqual([result.node_id])

    const again = await run(['subscription', 'reprovision', '--id', paid])
    expect(again.exitCode).toBe(4)
    expect(again.stderr.trim().split('\n')[0]).toMatch(new RegExp(`^Error: subscription ${paid} already has a live node ${result.node_id} \\((provisioning|syncing|healthy)\\)`))
    const againJson = await run(['subscription', 'reprovision', '--id', paid, '--json'])
    expect(json<{ error: { name: string; exit_code: number } }>(againJson).error).toMatchObject({ name: 'ConflictError', exit_code: 4 })

    for (const id of ['00000000-0000-4000-8000-000000000000', 'not-an-id']) {
      const missing = await run(['subscription', 'reprovision', '--id', id])
      expect(missing.exitCode, id).toBe(3)
      expect(missing.stderr.trim().split('\n')[0]).toBe(`Error: no subscription ${id}`)
    }
    expect((await run(['subscription', 'reprovision'])).exitCode).toBe(2)

    // The new node is real (the local provider's agent runs detached): let it finish, then terminate it.
    const state = async () => ((await db('nodes').where({ id: result.node_id }).first('state')) as { state: string }).state
    await waitFor(async () => ['syncing', 'healthy', 'failed'].includes(await state()), 'the new node to finish provisioning', 150_000, 500)
    expect((await run(['node', 'terminate', '--node', result.node_id, '--end-subscription', '--yes'])).exitCode).toBe(0)
    await waitFor(async () => (await state()) === 'terminated' || (await state()) === 'failed', 'the new node to be terminated', 90_000, 500)
  })
})
