import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import type { RolloutDetailView, RolloutGroupStatusView, RolloutNodeView, RolloutView } from '../../src/rollouts/views.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { waitFor } from '../helpers/ports.js'

interface ErrorOutput {
  error: { name: string; message: string; details?: string; exit_code: number }
}

/**
 * The nodes' agents run detached from `up`, in their own process groups (docs/infrastructure.md):
 * stop the ones this test's stack started, by the pids their hosts recorded.
 */
function stopLocalHosts(dataDir: string): void {
  const hosts = path.join(dataDir, 'hosts')
  if (!fs.existsSync(hosts)) return
  for (const host of fs.readdirSync(hosts)) {
    const record = path.join(hosts, host, 'host.json')
    if (!fs.existsSync(record)) continue
    const pid = Number((JSON.parse(fs.readFileSync(record, 'utf8')) as { pid: number }).pid)
    try {
      if (Number.isInteger(pid) && pid > 1) process.kill(-pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
}

/**
 * The rollout commands against one `nodeplane up` with two real devnet nodes on the local
 * provider, both running 1.0.0: a `full` one upgraded by a rolling rollout, an `archive` one by a
 * canary of the breaking manifest (the one-active-rollout rule is per chain, so they run one after
 * the other). Fast heartbeats and evaluation so the nodes are healthy within seconds.
 */
describe('rollout commands (against nodeplane up with real devnet nodes)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  const nodes: Record<'full' | 'archive', string> = { full: '', archive: '' }

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T
  const binaryVersion = async (nodeId: string): Promise<string | null> => {
    const shown = await run(['node', 'show', '--id', nodeId, '--json'])
    expect(shown.exitCode, shown.stderr).toBe(0)
    return json<{ binary_version: string | null }>(shown).binary_version
  }
  const rollouts = async (): Promise<RolloutView[]> => {
    const listed = await run(['rollout', 'list', '--json'])
    expect(listed.exitCode, listed.stderr).toBe(0)
    return json<{ rollouts: RolloutView[] }>(listed).rollouts
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), AGENT_HEARTBEAT_INTERVAL: '1s', HEALTH_EVALUATION_INTERVAL: '1s' } })
    const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
    db = createDatabase(stack.database_url)
    const operator = (await db('users').where({ email: 'operator@localhost' }).first()) as { id: string }
    const now = new Date()
    for (const type of ['full', 'archive'] as const) {
      const subscription = crypto.randomUUID()
      await db('subscriptions').insert({
        id: subscription,
        user_id: operator.id,
        chain_profile_id: 'devnet',
        node_type: type,
        duration: '1m',
        provider: 'local',
        region: 'local',
        instance_type: 'process',
        status: 'active',
        expires_at: new Date(now.getTime() + 30 * 86_400_000),
        created_at: now,
        updated_at: now,
      })
      const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: type, provider: 'local', region: 'local', instance_type: 'local.small' })
      nodes[type] = node.id
      const provision = await run(['node', 'provision', '--node', node.id, '--json'])
      expect(provision.exitCode, provision.stderr).toBe(0)
    }
    for (const id of Object.values(nodes)) {
      await waitFor(
        async () => {
          const shown = await run(['node', 'show', '--id', id, '--json'])
          return shown.exitCode === 0 && json<{ state: string }>(shown).state === 'healthy' ? true : undefined
        },
        `node ${id} healthy`,
        90_000,
        500,
      )
    }
  }, 180_000)

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    const stopped = up ? await up : undefined
    if (dir) stopLocalHosts(path.join(dir, '.nodeplane'))
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
    if (stopped) expect(stopped.exitCode).toBe(143)
  })

  it('refuses bad flags and non-admin keys without creating anything', async () => {
    const base = ['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--source-version', '1.0.0']
    const badStrategy = await run([...base, '--upgrade-id', 'devnet-1.1.0', '--strategy', 'bogus'])
    expect(badStrategy.exitCode).toBe(2)
    expect(badStrategy.stderr).toMatch(/strategy/)

    const threshold = await run([...base, '--upgrade-id', 'devnet-1.1.0', '--failure-threshold', '2', '--json'])
    expect(threshold.exitCode).toBe(2)
    expect(json<ErrorOutput>(threshold).error).toMatchObject({ name: 'ValidationError', exit_code: 2, message: expect.stringMatching(/--failure-threshold must be a fraction between 0\.0 and 1\.0/) })

    const manual = await run([...base, '--binary-name', 'devnet-node'])
    expect(manual.exitCode).toBe(2)
    expect(manual.stderr).toMatch(/^Error: manual mode \(no --upgrade-id\) needs --target-version, --target-url, --target-checksum\n {2}give --upgrade-id/)

    // Rules of the API (400 -> exit 2): a canary size without the canary strategy, a health wait under 1s.
    const canary = await run([...base, '--upgrade-id', 'devnet-1.1.0', '--canary-size', '2'])
    expect(canary.exitCode).toBe(2)
    expect(canary.stderr).toMatch(/^Error: invalid request: body\.canary_size: applies to the canary strategy only/)
    const healthWait = await run([...base, '--upgrade-id', 'devnet-1.1.0', '--health-wait', '1ms'])
    expect(healthWait.exitCode).toBe(2)
    expect(healthWait.stderr).toMatch(/body\.health_wait_duration: must be between 1s and 24h/)
    const unknownUpgrade = await run([...base, '--upgrade-id', 'devnet-9.9.9'])
    expect(unknownUpgrade.exitCode).toBe(2)

    const interval = await run(['rollout', 'status', '--id', crypto.randomUUID(), '--watch', '--interval', 'soon'])
    expect(interval.exitCode).toBe(2)
    expect(interval.stderr).toMatch(/--interval must be a duration/)

    expect(await rollouts()).toEqual([])

    const user = await run(['user', 'create', '--email', 'viewer@example.test', '--json'])
    expect(user.exitCode, user.stderr).toBe(0)
    const issued = await run(['api-key', 'issue', '--user', json<{ id: string }>(user).id, '--name', 'viewer', '--scopes', '*', '--json'])
    expect(issued.exitCode, issued.stderr).toBe(0)
    const viewer = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }
    const refused = await run([...base, '--upgrade-id', 'devnet-1.1.0'], viewer)
    expect(refused.exitCode).toBe(1)
    expect(refused.stderr).toMatch(/^Error: missing scope: this route requires the scope "admin"/)
    const refusedJson = await run(['rollout', 'list', '--json'], viewer)
    expect(refusedJson.exitCode).toBe(1)
    expect(json<ErrorOutput>(refusedJson).error).toMatchObject({ name: 'ForbiddenError', exit_code: 1, message: expect.stringMatching(/scope "admin"/) })
    expect(await rollouts()).toEqual([])

    const unknown = await run(['rollout', 'status', '--id', '0190f5c2-0000-7000-8000-000000000000'])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: no rollout 0190f5c2-0000-7000-8000-000000000000\n {2}list them with `nodeplane rollout list`/)
  })

  it('a rolling upgrade: create, one active rollout per chain, start --watch with one line per change, status, nodes, the node runs 1.1.0', { timeout: 180_000 }, async () => {
    const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--upgrade-id', 'devnet-1.1.0', '--source-version', '1.0.0', '--health-wait', '2s', '--reason', 'e2e', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const rollout = json<RolloutView>(created)
    expect(rollout).toMatchObject({ status: 'pending', upgrade_id: 'devnet-1.1.0', binary_name: 'devnet-node', source_version: '1.0.0', target_version: '1.1.0', strategy: 'rolling', health_wait_duration: '2s', reason: 'e2e' })
    expect(rollout.manifest_content_hash).toMatch(/^sha256:[0-9a-f]{64}$/)

    // One active rollout per chain: another node type of devnet is refused while this one is pending.
    const second = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'archive', '--upgrade-id', 'devnet-1.1.0', '--source-version', '1.0.0'])
    expect(second.exitCode).toBe(4)
    expect(second.stderr).toContain(`already has an active rollout (${rollout.id}, pending)`)

    // A rollout never started waits for an operator.
    const pending = await run(['rollout', 'status', '--id', rollout.id, '--watch'])
    expect(pending.exitCode).toBe(6)
    expect(pending.stdout).toContain(`nodeplane rollout start --id ${rollout.id} --watch`)
    const text = await run(['rollout', 'status', '--id', rollout.id])
    expect(text.exitCode, text.stderr).toBe(0)
    expect(text.stdout).toMatch(/status: +pending: created, not started/)

    const started = await run(['rollout', 'start', '--id', rollout.id, '--watch', '--interval', '250ms'])
    expect(started.exitCode, started.stdout + started.stderr).toBe(0)
    const lines = started.stdout.trim().split('\n')
    expect(lines[0]).toBe(`Rollout ${rollout.id} started.`)
    expect(lines.at(-1)).toBe(`Rollout ${rollout.id} completed: 1/1 nodes upgraded to 1.1.0.`)
    const changes = lines.slice(1, -1)
    for (const line of changes) expect(line).toMatch(/^\d\d:\d\d:\d\dZ (rollout|node) /)
    expect(changes[0]).toMatch(new RegExp(`^\\S+ rollout ${rollout.id} running`))
    expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ node ${nodes.full} \\(batch 0\\) in_progress`)))
    expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ node ${nodes.full} \\(batch 0\\) succeeded, phase completed$`)))
    expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ rollout ${rollout.id} completed, 1 batch: 1/1 succeeded, 0 failed$`)))
    // One line per change: no line repeats the one before it for the same subject.
    expect(new Set(changes.map((l) => l.slice(10))).size).toBe(changes.length)

    const status = await run(['rollout', 'status', '--id', rollout.id, '--json'])
    expect(status.exitCode, status.stderr).toBe(0)
    expect(json<RolloutDetailView>(status)).toMatchObject({ id: rollout.id, status: 'completed', total_nodes: 1, succeeded_nodes: 1, failed_nodes: 0, node_counts: { succeeded: 1, failed: 0 } })
    const listed = await run(['rollout', 'nodes', '--id', rollout.id, '--json'])
    expect(listed.exitCode, listed.stderr).toBe(0)
    expect(json<{ nodes: RolloutNodeView[] }>(listed).nodes).toEqual([
      expect.objectContaining({ node_id: nodes.full, batch_index: 0, status: 'succeeded', upgrade_phase: 'completed', previous_version: '1.0.0', attempt_count: 1 }),
    ])
    const failedOnly = await run(['rollout', 'nodes', '--id', rollout.id, '--status', 'failed', '--json'])
    expect(json<{ nodes: RolloutNodeView[] }>(failedOnly).nodes).toEqual([])
    expect(await binaryVersion(nodes.full)).toBe('1.1.0')
    expect(await binaryVersion(nodes.archive)).toBe('1.0.0')

    // Watching a finished rollout returns at once with its outcome; actions it no longer allows exit 4.
    const watchDone = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
    expect(watchDone.exitCode).toBe(0)
    expect(json<RolloutDetailView>(watchDone).status).toBe('completed')
    const again = await run(['rollout', 'start', '--id', rollout.id, '--json'])
    expect(again.exitCode).toBe(4)
    expect(json<ErrorOutput>(again).error).toMatchObject({ name: 'ConflictError', exit_code: 4 })
    const approve = await run(['rollout', 'approve-canary', '--id', rollout.id])
    expect(approve.exitCode).toBe(4)
    expect(approve.stderr).toMatch(/not waiting for a canary approval/)
    const cancel = await run(['rollout', 'cancel', '--id', rollout.id])
    expect(cancel.exitCode).toBe(4)

    const list = await run(['rollout', 'list', '--status', 'completed', '--chain', 'devnet'])
    expect(list.exitCode, list.stderr).toBe(0)
    expect(list.stdout).toMatch(new RegExp(`${rollout.id} +devnet/full +devnet-node 1\\.0\\.0 -> 1\\.1\\.0 +rolling +completed +1/1 succeeded, 0 failed`))
    const none = await run(['rollout', 'list', '--status', 'running'])
    expect(none.stdout.trim()).toBe('No rollouts match these filters.')
  })

  it('a breaking canary: start --watch exits 6 at the approval gate, approve-canary --watch exits 0 when completed', { timeout: 180_000 }, async () => {
    const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'archive', '--upgrade-id', 'devnet-1.1.0-breaking', '--source-version', '1.0.0', '--strategy', 'canary', '--health-wait', '2s', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const rollout = json<RolloutView>(created)
    expect(rollout).toMatchObject({ strategy: 'canary', canary_size: 1, migration_type: 'breaking' })

    const started = await run(['rollout', 'start', '--id', rollout.id, '--watch', '--interval', '250ms'])
    expect(started.exitCode, started.stdout + started.stderr).toBe(6)
    expect(started.stdout).toContain(`Rollout ${rollout.id} waits for an operator: the canary of a breaking migration waits for approval.`)
    expect(started.stdout).toContain(`  nodeplane rollout approve-canary --id ${rollout.id} --watch`)
    expect(started.stdout).toMatch(new RegExp(`rollout ${rollout.id} running \\(awaiting approve_canary\\)`))
    const waiting = json<RolloutDetailView>(await run(['rollout', 'status', '--id', rollout.id, '--json']))
    expect(waiting).toMatchObject({ status: 'running', awaiting: 'approve_canary', succeeded_nodes: 1 })
    // The canary node is upgraded; nothing else moves until the approval.
    expect(await binaryVersion(nodes.archive)).toBe('1.1.0')
    const stillWaiting = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
    expect(stillWaiting.exitCode).toBe(6)
    expect(json<RolloutDetailView>(stillWaiting).awaiting).toBe('approve_canary')

    // --watch on the signal: it does not stop on the awaiting state the approval ends.
    const approved = await run(['rollout', 'approve-canary', '--id', rollout.id, '--watch', '--interval', '250ms'])
    expect(approved.exitCode, approved.stdout + approved.stderr).toBe(0)
    expect(approved.stdout.trim().split('\n').at(-1)).toBe(`Rollout ${rollout.id} completed: 1/1 nodes upgraded to 1.1.0.`)
    const watched = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
    expect(watched.exitCode, watched.stderr).toBe(0)
    expect(json<RolloutDetailView>(watched)).toMatchObject({ status: 'completed', awaiting: null, succeeded_nodes: 1 })
  })

  it('rollout groups: create from flags or a file, status per component, start, a finished group refuses cancel', { timeout: 120_000 }, async () => {
    const file = path.join(dir, 'group.json')
    fs.writeFileSync(file, JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0', upgrade_id: 'devnet-1.1.0' }] }))
    const noPolicy = await run(['rollout-group', 'create', '--file', file])
    expect(noPolicy.exitCode).toBe(2)
    expect(noPolicy.stderr).toMatch(/^Error: a rollout group needs --failure-policy/)
    const badComponent = await run(['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node'])
    expect(badComponent.exitCode).toBe(2)
    expect(badComponent.stderr).toMatch(/--component "devnet-node" must be BINARY:VERSION/)

    const created = await run(['rollout-group', 'create', '--file', file, '--failure-policy', 'partial_ok', '--health-wait', '2s', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const group = json<RolloutGroupStatusView>(created)
    expect(group).toMatchObject({ status: 'pending', failure_policy: 'partial_ok', health_wait_duration: '2s', component_order: [expect.objectContaining({ binary_name: 'devnet-node', version: '1.1.0', upgrade_id: 'devnet-1.1.0' })] })
    const duplicate = await run(['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node:1.1.0'])
    expect(duplicate.exitCode).toBe(4)

    const status = await run(['rollout-group', 'status', '--id', group.id, '--json'])
    expect(status.exitCode, status.stderr).toBe(0)
    expect(json<RolloutGroupStatusView>(status).components).toEqual([expect.objectContaining({ component_index: 0, status: 'not_started', rollout_id: null })])

    const started = await run(['rollout-group', 'start', '--id', group.id])
    expect(started.exitCode, started.stderr).toBe(0)
    expect(started.stdout).toContain(`Rollout group ${group.id} started`)
    // Every devnet full node already runs 1.1.0: the group has nothing to upgrade and completes.
    await waitFor(async () => (json<RolloutGroupStatusView>(await run(['rollout-group', 'status', '--id', group.id, '--json'])).status === 'completed' ? true : undefined), 'the group to complete', 60_000, 500)
    const shown = await run(['rollout-group', 'status', '--id', group.id])
    expect(shown.stdout).toMatch(/status: +completed/)
    const cancel = await run(['rollout-group', 'cancel', '--id', group.id])
    expect(cancel.exitCode).toBe(4)
    expect(cancel.stderr).toMatch(/^Error: cannot cancel rollout group/)
    const unknown = await run(['rollout-group', 'status', '--id', crypto.randomUUID()])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: no rollout group /)
  })
})
