import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import type { RolloutDetailView, RolloutGroupStatusView, RolloutGroupView, RolloutNodeView, RolloutView } from '../../src/rollouts/views.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../helpers/db.js'
import { insertSubscription } from '../helpers/fixtures.js'
import { waitFor } from '../helpers/ports.js'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
/** A devnet release artifact of the catalogue (chains/devnet/profile.yaml). */
const releaseUrl = (version: string): string => pathToFileURL(path.join(REPO, `chains/devnet/releases/devnet-node-${version}.mjs`)).href
const SHA256_100 = 'sha256:47471e355b0963bd17a6bc7958d783d7f23bb09662fcd3aa8b206db51cfcc077'

/**
 * Commands that change nothing and are checked against the same state run a few at a time (each
 * is a process start: at once they use both cores) instead of one after the other. The results
 * come back in order once every call has ended: a failed check in one is thrown then, with no
 * process of the batch left running. Three at a time: a batch of a dozen at once on a loaded
 * machine ran past the 60 s a command may take.
 */
async function atOnce<T extends readonly (() => Promise<unknown>)[]>(calls: [...T]): Promise<{ [K in keyof T]: T[K] extends () => Promise<infer R> ? R : never }> {
  const settled: Array<PromiseSettledResult<unknown>> = []
  let next = 0
  const lane = async (): Promise<void> => {
    for (let i = next++; i < calls.length; i = next++) {
      const call = calls[i] as () => Promise<unknown>
      settled[i] = await call().then(
        (value) => ({ status: 'fulfilled', value }) as const,
        (reason: unknown) => ({ status: 'rejected', reason }) as const,
      )
    }
  }
  await Promise.all(Array.from({ length: Math.min(3, calls.length) }, lane))
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed) throw failed.reason
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as never
}

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
 * The rollout commands against one `nodeplane up` per database with real devnet nodes on the
 * local provider, all running 1.0.0. Fast heartbeats, evaluation and workflow polling so the
 * nodes are healthy, and a rollout moves on, within seconds. On Postgres `up` gets DATABASE_URL /
 * PAYMENTS_DATABASE_URL of two empty databases and migrates them itself.
 *
 * One suite per dialect, each registered by a test file of its own (rollout-commands.test.ts,
 * SQLite; rollout-commands-postgres.test.ts, Postgres) so that vitest runs the two at the same
 * time. Each has its own `up` and nodes, and every CLI call is a process start, so the tests are
 * shared out between them: on BOTH, the stack comes up on that database, the representative
 * journey (create, one active rollout per chain, start --watch -> exit 0, status / nodes --json,
 * the node runs 1.1.0) and a non-admin key's 403s (exit 77, one-line reason, nothing written). On
 * SQLITE ONLY: the flag refusals, pause / resume / rollback (rolled back, exit 1) and rollout-group
 * pause / resume / skip. On POSTGRES ONLY (it provisions a second, `archive` node for them): the
 * breaking canary, rollout groups and a failing rollout (start --watch exit 6 at the failure
 * threshold, retry-node, force refused without --yes, with it -> failed, exit 1). A suite's tests run in order:
 * each one starts from the versions the one before left the nodes on. Commands that change
 * nothing, checked against the same state, run at once.
 */
export function rolloutCommandsSuite(dialect: Dialect): void {
  describe(`rollout commands on ${dialect} (against nodeplane up with real devnet nodes)`, () => {
    /** Postgres provisions a second, `archive` node, for the tests that run on it. */
    const withArchive = dialect === 'postgres'
    const nodeTypes = withArchive ? (['full', 'archive'] as const) : (['full'] as const)
    /** Registers the test on that dialect only: on the other it does not exist (rather than being skipped). */
    const itOn = (only: Dialect, name: string, options: { timeout: number }, fn: () => Promise<void>): void => {
      if (dialect === only) it(name, options, fn)
    }
    let dir: string
    let up: ReturnType<typeof spawnNodeplane>
    let db: Db
    const databases: TestDatabase[] = []
    const nodes: Record<'full' | 'archive', string> = { full: '', archive: '' }

    /** The databases `up` was given, for the commands that open them (an operator's shell has the same environment). */
    const databaseEnv: Record<string, string> = {}
    const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env: { ...databaseEnv, ...env } })
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
    /** Waits in the database (no CLI process per look): a node upgraded a moment ago is syncing, and a rollout plans only healthy nodes. */
    const untilHealthy = (nodeId: string, timeoutMs = 60_000): Promise<true> =>
      waitFor(async () => (((await db('nodes').where({ id: nodeId }).first('state')) as { state: string } | undefined)?.state === 'healthy' ? true : undefined), `node ${nodeId} healthy`, timeoutMs, 250)
    const untilGroup = (groupId: string, status: string): Promise<true> =>
      waitFor(async () => (((await db('rollout_groups').where({ id: groupId }).first('status')) as { status: string } | undefined)?.status === status ? true : undefined), `group ${groupId} ${status}`, 90_000, 250)

    beforeAll(async () => {
      dir = fs.realpathSync(tempDir())
      const env: Record<string, string> = { ...(await upPorts()), AGENT_HEARTBEAT_INTERVAL: '1s', HEALTH_EVALUATION_INTERVAL: '1s', WORKFLOW_POLL_INTERVAL: '250ms' }
      if (dialect === 'postgres') {
        const controlPlane = await createTestDatabase('postgres', { migrated: false })
        databases.push(controlPlane)
        const payments = await createTestDatabase('postgres', { database: 'payments', migrated: false })
        databases.push(payments)
        Object.assign(databaseEnv, { DATABASE_URL: controlPlane.url, PAYMENTS_DATABASE_URL: payments.url })
        Object.assign(env, databaseEnv)
      }
      up = spawnNodeplane(['up'], { cwd: dir, env })
      const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
      db = dialect === 'postgres' ? (databases[0] as TestDatabase).connect() : createDatabase(stack.database_url)
      if (dialect === 'postgres') expect(stack.database_url).toMatch(/^postgres:\/\//)
      const operator = (await db('users').where({ email: 'operator@localhost' }).first()) as { id: string }
      const now = new Date()
      for (const type of nodeTypes) {
        const subscription = await insertSubscription(db, operator.id, now, type)
        const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: type, provider: 'local', region: 'local', instance_type: 'local.small' })
        nodes[type] = node.id
      }
      for (const provision of await Promise.all(nodeTypes.map((type) => run(['node', 'provision', '--node', nodes[type], '--json'])))) expect(provision.exitCode, provision.stderr).toBe(0)
      for (const type of nodeTypes) await untilHealthy(nodes[type], 90_000)
    }, 180_000)

    afterAll(async () => {
      if (dialect === 'sqlite') await db?.destroy()
      up?.kill('SIGTERM')
      const stopped = up ? await up : undefined
      if (dir) stopLocalHosts(path.join(dir, '.nodeplane'))
      if (dir) fs.rmSync(dir, { recursive: true, force: true })
      // Postgres: the pools first (connect() belongs to the database), then the databases.
      for (const database of databases.splice(0)) await database.destroy()
      if (stopped) expect(stopped.exitCode).toBe(143)
    }, 60_000)

    itOn('sqlite', 'refuses bad flags without creating anything', { timeout: 120_000 }, async () => {
      const base = ['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--source-version', '1.0.0']
      // Independent refusals (atOnce), checked one by one below.
      const [badStrategy, threshold, manual, canary, healthWait, unknownUpgrade, interval] = await atOnce([
        () => run([...base, '--upgrade-id', 'devnet-1.1.0', '--strategy', 'bogus']),
        () => run([...base, '--upgrade-id', 'devnet-1.1.0', '--failure-threshold', '2', '--json']),
        () => run([...base, '--binary-name', 'devnet-node']),
        () => run([...base, '--upgrade-id', 'devnet-1.1.0', '--canary-size', '2']),
        () => run([...base, '--upgrade-id', 'devnet-1.1.0', '--health-wait', '1ms']),
        () => run([...base, '--upgrade-id', 'devnet-9.9.9']),
        () => run(['rollout', 'status', '--id', crypto.randomUUID(), '--watch', '--interval', 'soon']),
      ])
      expect(badStrategy.exitCode).toBe(2)
      expect(badStrategy.stderr).toMatch(/strategy/)

      expect(threshold.exitCode).toBe(2)
      expect(json<ErrorOutput>(threshold).error).toMatchObject({ name: 'ValidationError', exit_code: 2, message: expect.stringMatching(/--failure-threshold must be a fraction between 0\.0 and 1\.0/) })

      expect(manual.exitCode).toBe(2)
      expect(manual.stderr).toMatch(/^Error: manual mode \(no --upgrade-id\) needs --artifact BINARY@VERSION, or --target-version, --target-checksum\n {2}give --upgrade-id/)

      // Rules of the API (400 -> exit 2): a canary size without the canary strategy, a health wait under 1s.
      expect(canary.exitCode).toBe(2)
      expect(canary.stderr).toMatch(/^Error: invalid request: body\.canary_size: applies to the canary strategy only/)
      expect(healthWait.exitCode).toBe(2)
      expect(healthWait.stderr).toMatch(/body\.health_wait_duration: must be between 1s and 24h/)
      expect(unknownUpgrade.exitCode).toBe(2)

      expect(interval.exitCode).toBe(2)
      expect(interval.stderr).toMatch(/--interval must be a duration/)

      // After every refusal above: none created anything.
      const [listed, unknown] = await atOnce([() => rollouts(), () => run(['rollout', 'status', '--id', '0190f5c2-0000-7000-8000-000000000000'])])
      expect(listed).toEqual([])

      expect(unknown.exitCode).toBe(3)
      expect(unknown.stderr).toMatch(/^Error: no rollout 0190f5c2-0000-7000-8000-000000000000\n {2}list them with `nodeplane rollout list`/)
    })

    it('a rolling upgrade: create, one active rollout per chain, start --watch with one line per change, status, nodes, the node runs 1.1.0', { timeout: 180_000 }, async () => {
      // Health waits of 5 s: on a loaded CI machine a restarted devnet node took over 2 s to send
      // its first healthy report, and the validation failed as if it never came up.
      const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--upgrade-id', 'devnet-1.1.0', '--source-version', '1.0.0', '--health-wait', '5s', '--reason', 'e2e', '--json'])
      expect(created.exitCode, created.stderr).toBe(0)
      const rollout = json<RolloutView>(created)
      expect(rollout).toMatchObject({ status: 'pending', upgrade_id: 'devnet-1.1.0', binary_name: 'devnet-node', source_version: '1.0.0', target_version: '1.1.0', strategy: 'rolling', health_wait_duration: '5s', reason: 'e2e' })
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
      expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ node ${nodes.full} \\(batch 1\\) in_progress`)))
      expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ node ${nodes.full} \\(batch 1\\) succeeded, phase completed$`)))
      expect(changes).toContainEqual(expect.stringMatching(new RegExp(`^\\S+ rollout ${rollout.id} completed, 1 batch: 1/1 succeeded, 0 failed$`)))
      // One line per change: no line repeats the one before it for the same subject.
      expect(new Set(changes.map((l) => l.slice(10))).size).toBe(changes.length)

      // The completed rollout, seen and acted on by commands that change nothing (atOnce), checked
      // one by one below.
      const [status, listed, failedOnly, fullVersion, archiveVersion, watchDone, again, approve, cancel, list, none] = await atOnce([
        () => run(['rollout', 'status', '--id', rollout.id, '--json']),
        () => run(['rollout', 'nodes', '--id', rollout.id, '--json']),
        () => run(['rollout', 'nodes', '--id', rollout.id, '--status', 'failed', '--json']),
        () => binaryVersion(nodes.full),
        async () => (withArchive ? binaryVersion(nodes.archive) : undefined),
        () => run(['rollout', 'status', '--id', rollout.id, '--watch', '--json']),
        () => run(['rollout', 'start', '--id', rollout.id, '--json']),
        () => run(['rollout', 'approve-canary', '--id', rollout.id]),
        () => run(['rollout', 'cancel', '--id', rollout.id]),
        () => run(['rollout', 'list', '--status', 'completed', '--chain', 'devnet']),
        () => run(['rollout', 'list', '--status', 'running']),
      ])
      expect(status.exitCode, status.stderr).toBe(0)
      expect(json<RolloutDetailView>(status)).toMatchObject({ id: rollout.id, status: 'completed', total_nodes: 1, succeeded_nodes: 1, failed_nodes: 0, node_counts: { succeeded: 1, failed: 0 } })
      expect(listed.exitCode, listed.stderr).toBe(0)
      expect(json<{ nodes: RolloutNodeView[] }>(listed).nodes).toEqual([
        expect.objectContaining({ node_id: nodes.full, batch_index: 0, status: 'succeeded', upgrade_phase: 'completed', previous_version: '1.0.0', attempt_count: 1 }),
      ])
      expect(json<{ nodes: RolloutNodeView[] }>(failedOnly).nodes).toEqual([])
      expect(fullVersion).toBe('1.1.0')
      if (withArchive) expect(archiveVersion).toBe('1.0.0')

      // Watching a finished rollout returns at once with its outcome; actions it no longer allows exit 4.
      expect(watchDone.exitCode).toBe(0)
      expect(json<RolloutDetailView>(watchDone).status).toBe('completed')
      expect(again.exitCode).toBe(4)
      expect(json<ErrorOutput>(again).error).toMatchObject({ name: 'ConflictError', exit_code: 4 })
      expect(approve.exitCode).toBe(4)
      expect(approve.stderr).toMatch(/not waiting for a canary approval/)
      expect(cancel.exitCode).toBe(4)

      expect(list.exitCode, list.stderr).toBe(0)
      expect(list.stdout).toMatch(new RegExp(`${rollout.id} +devnet/full +devnet-node 1\\.0\\.0 -> 1\\.1\\.0 +rolling +completed +1/1 succeeded, 0 failed`))
      expect(none.stdout.trim()).toBe('No rollouts match these filters.')
    })

    it('a key without the admin scope: exit 77 and a one-line reason for create, signals and retry-node; nothing is written', { timeout: 120_000 }, async () => {
      const before = await rollouts()
      const done = before[0] as RolloutView
      expect(done.status).toBe('completed')
      const user = await run(['user', 'create', '--email', 'viewer@example.test', '--json'])
      expect(user.exitCode, user.stderr).toBe(0)
      const issued = await run(['api-key', 'issue', '--user', json<{ id: string }>(user).id, '--name', 'viewer', '--scopes', '*', '--json'])
      expect(issued.exitCode, issued.stderr).toBe(0)
      const viewer = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }

      const attempts = [
        ['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--source-version', '1.1.0', '--binary-name', 'devnet-node', '--target-version', '1.0.0', '--target-url', releaseUrl('1.0.0'), '--target-checksum', SHA256_100],
        ['rollout', 'pause', '--id', done.id],
        ['rollout', 'rollback', '--id', done.id, '--yes'],
        ['rollout', 'retry-node', '--id', done.id, '--node', nodes.full],
        ['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node:1.0.0'],
      ]
      // Refused, so nothing changes (atOnce): checked one by one.
      const [refusedJson, ...refusals] = await atOnce([() => run(['rollout', 'list', '--json'], viewer), ...attempts.map((args) => () => run(args, viewer))])
      for (const [i, args] of attempts.entries()) {
        const refused = refusals[i] as CliResult
        expect(refused.exitCode, args.join(' ')).toBe(77)
        expect(refused.stdout, args.join(' ')).toBe('')
        // The reason is one line (the hint under it is indented); no stack trace.
        const [reason, ...rest] = refused.stderr.trimEnd().split('\n')
        expect(reason, args.join(' ')).toMatch(/^Error: missing scope: this route requires the scope "admin"[^\n]*$/)
        for (const line of rest) expect(line).toMatch(/^ {2}\S/)
        expect(refused.stderr).not.toMatch(/^\s+at /m)
      }
      expect(refusedJson.exitCode).toBe(77)
      expect(json<ErrorOutput>(refusedJson).error).toMatchObject({ name: 'ForbiddenError', exit_code: 77, message: expect.stringMatching(/scope "admin"/) })
      // Nothing written: the same rollouts, the refused signals left no trace on the one that exists.
      expect(await rollouts()).toEqual(before)
      expect(Number(((await db('rollout_groups').count({ n: '*' }).first()) as { n: unknown }).n)).toBe(0)
    })

    itOn('postgres', 'a breaking canary: start --watch exits 6 at the approval gate, approve-canary --watch exits 0 when completed', { timeout: 180_000 }, async () => {
      const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'archive', '--upgrade-id', 'devnet-1.1.0-breaking', '--source-version', '1.0.0', '--strategy', 'canary', '--health-wait', '5s', '--json'])
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
      const approved = await run(['rollout', 'approve-canary', '--id', rollout.id, '--yes', '--watch', '--interval', '250ms'])
      expect(approved.exitCode, approved.stdout + approved.stderr).toBe(0)
      expect(approved.stdout.trim().split('\n').at(-1)).toBe(`Rollout ${rollout.id} completed: 1/1 nodes upgraded to 1.1.0.`)
      const watched = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
      expect(watched.exitCode, watched.stderr).toBe(0)
      expect(json<RolloutDetailView>(watched)).toMatchObject({ status: 'completed', awaiting: null, succeeded_nodes: 1 })
    })

    itOn('postgres', 'rollout groups: create from flags or a file, status per component, start, a finished group refuses cancel', { timeout: 120_000 }, async () => {
      const file = path.join(dir, 'group.json')
      fs.writeFileSync(file, JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0', upgrade_id: 'devnet-1.1.0' }] }))
      const noPolicy = await run(['rollout-group', 'create', '--file', file])
      expect(noPolicy.exitCode).toBe(2)
      expect(noPolicy.stderr).toMatch(/^Error: a rollout group needs --failure-policy/)
      const badComponent = await run(['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node'])
      expect(badComponent.exitCode).toBe(2)
      expect(badComponent.stderr).toMatch(/--component "devnet-node" must be BINARY:VERSION/)

      const created = await run(['rollout-group', 'create', '--file', file, '--failure-policy', 'partial_ok', '--health-wait', '5s', '--json'])
      expect(created.exitCode, created.stderr).toBe(0)
      const group = json<RolloutGroupStatusView>(created)
      expect(group).toMatchObject({ status: 'pending', failure_policy: 'partial_ok', health_wait_duration: '5s', component_order: [expect.objectContaining({ binary_name: 'devnet-node', version: '1.1.0', upgrade_id: 'devnet-1.1.0' })] })
      const duplicate = await run(['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node:1.1.0'])
      expect(duplicate.exitCode).toBe(4)

      const status = await run(['rollout-group', 'status', '--id', group.id, '--json'])
      expect(status.exitCode, status.stderr).toBe(0)
      expect(json<RolloutGroupStatusView>(status).components).toEqual([expect.objectContaining({ component_index: 0, status: 'not_started', rollout_id: null })])

      const started = await run(['rollout-group', 'start', '--id', group.id])
      expect(started.exitCode, started.stderr).toBe(0)
      expect(started.stdout).toContain(`Rollout group ${group.id} started`)
      // Every devnet full node already runs 1.1.0: the group has nothing to upgrade and completes.
      await untilGroup(group.id, 'completed')
      const shown = await run(['rollout-group', 'status', '--id', group.id])
      expect(shown.stdout).toMatch(/status: +completed/)
      const cancel = await run(['rollout-group', 'cancel', '--id', group.id])
      expect(cancel.exitCode).toBe(4)
      expect(cancel.stderr).toMatch(/^Error: cannot cancel rollout group/)
      const unknown = await run(['rollout-group', 'status', '--id', crypto.randomUUID()])
      expect(unknown.exitCode).toBe(3)
      expect(unknown.stderr).toMatch(/^Error: no rollout group /)
    })

    itOn(
      'postgres',
      'a failing upgrade: start --watch exits 6 at the failure threshold, retry-node, force refused without --yes (no terminal), --yes --watch exits 1 failed',
      { timeout: 240_000 },
      async () => {
        // The archive node runs 1.1.0 (the canary above). Manual mode, the 1.1.0 artifact under a
        // checksum it does not have: the agent's VerifyArtifact fails and the node stays on 1.1.0.
        await untilHealthy(nodes.archive)
        const badChecksum = `sha256:${'0'.repeat(64)}`
        const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'archive', '--source-version', '1.1.0', '--binary-name', 'devnet-node', '--target-version', '1.2.0', '--target-url', releaseUrl('1.1.0'), '--target-checksum', badChecksum, '--failure-threshold', '0', '--health-wait', '1s', '--json'])
        expect(created.exitCode, created.stderr).toBe(0)
        const rollout = json<RolloutView>(created)
        expect(rollout).toMatchObject({ status: 'pending', upgrade_id: null, source_version: '1.1.0', target_version: '1.2.0', failure_threshold: 0 })

        // failed/attempted 1/1 > 0: the rollout auto-pauses for an operator (exit 6), it does not fail.
        const started = await run(['rollout', 'start', '--id', rollout.id, '--watch', '--interval', '250ms'])
        expect(started.exitCode, started.stdout + started.stderr).toBe(6)
        expect(started.stdout).toContain(`Rollout ${rollout.id} waits for an operator: auto-paused: more nodes failed than the failure threshold allows`)
        expect(started.stdout).toMatch(new RegExp(`node ${nodes.archive} \\(batch 1\\) failed`))
        const paused = await run(['rollout', 'status', '--id', rollout.id, '--json'])
        expect(json<RolloutDetailView>(paused)).toMatchObject({ status: 'paused', pause_reason: 'failure_threshold', failed_nodes: 1, succeeded_nodes: 0 })
        const failed = await run(['rollout', 'nodes', '--id', rollout.id, '--status', 'failed', '--json'])
        expect(failed.exitCode, failed.stderr).toBe(0)
        expect(json<{ nodes: RolloutNodeView[] }>(failed).nodes).toEqual([expect.objectContaining({ node_id: nodes.archive, status: 'failed', attempt_count: 1, previous_version: '1.1.0' })])

        const retried = await run(['rollout', 'retry-node', '--id', rollout.id, '--node', nodes.archive, '--json'])
        expect(retried.exitCode, retried.stderr).toBe(0)
        expect(json<RolloutNodeView>(retried)).toMatchObject({ rollout_id: rollout.id, node_id: nodes.archive, status: 'pending', attempt_count: 1 })
        const again = await run(['rollout', 'retry-node', '--id', rollout.id, '--node', nodes.archive])
        expect(again.exitCode).toBe(4)
        expect(again.stderr).toMatch(/^Error: node \S+ of rollout \S+ is pending: only a failed node can be retried/)
        const unknownNode = await run(['rollout', 'retry-node', '--id', rollout.id, '--node', crypto.randomUUID()])
        // A node that is not part of the rollout is a conflict with the rollout, not an unknown rollout (exit 3).
        expect(unknownNode.exitCode).toBe(4)
        expect(unknownNode.stderr).toMatch(/^Error: node \S+ is not part of rollout /)

        // A destructive signal without --yes and without a terminal: refused (exit 2), nothing sent.
        const unconfirmed = await run(['rollout', 'force', '--id', rollout.id])
        expect(unconfirmed.exitCode).toBe(2)
        expect(unconfirmed.stderr).toContain('--yes')
        expect(json<RolloutDetailView>(await run(['rollout', 'status', '--id', rollout.id, '--json']))).toMatchObject({ status: 'paused', pause_reason: 'failure_threshold' })
        // The retried node is upgraded again and fails again; forced, the threshold no longer pauses: failed, exit 1.
        const forced = await run(['rollout', 'force', '--id', rollout.id, '--yes', '--watch', '--interval', '250ms'])
        expect(forced.exitCode, forced.stdout + forced.stderr).toBe(1)
        expect(forced.stderr).toBe('')
        const lines = forced.stdout.trim().split('\n')
        expect(lines[0]).toBe(`Rollout ${rollout.id} forced past its failure threshold: it goes on.`)
        expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^Rollout ${rollout.id} failed: 0/1 succeeded, 1 failed\\.`)))
        expect(forced.stdout).toContain('(forced)')
        const nodesAfter = await run(['rollout', 'nodes', '--id', rollout.id, '--json'])
        expect(json<{ nodes: RolloutNodeView[] }>(nodesAfter).nodes).toEqual([expect.objectContaining({ node_id: nodes.archive, status: 'failed', attempt_count: 2 })])
        const watched = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
        expect(watched.exitCode).toBe(1)
        expect(json<RolloutDetailView>(watched)).toMatchObject({ status: 'failed', forced: true, failed_nodes: 1 })
        expect(await binaryVersion(nodes.archive)).toBe('1.1.0')
        const late = await run(['rollout', 'retry-node', '--id', rollout.id, '--node', nodes.archive])
        expect(late.exitCode).toBe(4)
        expect(late.stderr).toMatch(/^Error: cannot retry a node of rollout \S+: it is failed/)
      },
    )

    itOn(
      'sqlite',
      'pause --watch exits 6 once paused, resume --watch exits 6 at the approval gate, rollback --yes --watch and status --watch exit 1 when rolled back',
      { timeout: 240_000 },
      async () => {
        // The full node runs 1.1.0: a manual, breaking canary back to the 1.0.0 release.
        await untilHealthy(nodes.full)
        const created = await run(['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--source-version', '1.1.0', '--binary-name', 'devnet-node', '--target-version', '1.0.0', '--target-url', releaseUrl('1.0.0'), '--target-checksum', SHA256_100, '--migration-type', 'breaking', '--strategy', 'canary', '--health-wait', '5s', '--json'])
        expect(created.exitCode, created.stderr).toBe(0)
        const rollout = json<RolloutView>(created)
        const resumeEarly = await run(['rollout', 'resume', '--id', rollout.id])
        expect(resumeEarly.exitCode).toBe(4)

        const started = await run(['rollout', 'start', '--id', rollout.id])
        expect(started.exitCode, started.stderr).toBe(0)
        expect(started.stdout.trim()).toBe(`Rollout ${rollout.id} started. Follow it with \`nodeplane rollout status --id ${rollout.id} --watch\`.`)
        // Taken between batches (or at the canary gate): the rollout pauses, and --watch returns then.
        const pause = await run(['rollout', 'pause', '--id', rollout.id, '--watch', '--interval', '250ms'])
        expect(pause.exitCode, pause.stdout + pause.stderr).toBe(6)
        expect(pause.stdout.split('\n')[0]).toBe(`Rollout ${rollout.id} will pause after its current batch.`)
        expect(pause.stdout).toContain(`Rollout ${rollout.id} waits for an operator: paused by an operator.`)
        expect(pause.stdout).toContain(`nodeplane rollout resume --id ${rollout.id}`)
        const paused = await run(['rollout', 'status', '--id', rollout.id, '--json'])
        expect(json<RolloutDetailView>(paused)).toMatchObject({ status: 'paused', pause_reason: 'operator' })
        // A repeat (docs/cli.md, "Repeats"): exit 0, the rollout as it is, nothing changed.
        const pauseAgain = await run(['rollout', 'pause', '--id', rollout.id, '--json'])
        expect(pauseAgain.exitCode, pauseAgain.stderr).toBe(0)
        expect(json<RolloutView & { changed: boolean }>(pauseAgain)).toMatchObject({ id: rollout.id, status: 'paused', changed: false })

        const resumed = await run(['rollout', 'resume', '--id', rollout.id, '--watch', '--interval', '250ms'])
        expect(resumed.exitCode, resumed.stdout + resumed.stderr).toBe(6)
        expect(resumed.stdout.split('\n')[0]).toBe(`Rollout ${rollout.id} resumes.`)
        expect(resumed.stdout).toContain(`Rollout ${rollout.id} waits for an operator: the canary of a breaking migration waits for approval.`)
        expect(await binaryVersion(nodes.full)).toBe('1.0.0')

        const rolledBack = await run(['rollout', 'rollback', '--id', rollout.id, '--yes', '--watch', '--interval', '250ms'])
        expect(rolledBack.exitCode, rolledBack.stdout + rolledBack.stderr).toBe(1)
        const lines = rolledBack.stdout.trim().split('\n')
        expect(lines[0]).toBe(`Rollout ${rollout.id} is being rolled back: every upgraded node returns to the source version.`)
        expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^Rollout ${rollout.id} rolled back: 0/1 succeeded, 0 failed\\.$`)))
        const watched = await run(['rollout', 'status', '--id', rollout.id, '--watch', '--json'])
        expect(watched.exitCode).toBe(1)
        expect(json<RolloutDetailView>(watched)).toMatchObject({ status: 'rolled_back', awaiting: null })
        const text = await run(['rollout', 'status', '--id', rollout.id, '--watch'])
        expect(text.exitCode).toBe(1)
        expect(text.stdout).toMatch(new RegExp(`^Rollout ${rollout.id} rolled back`, 'm'))
        const listed = await run(['rollout', 'nodes', '--id', rollout.id, '--json'])
        expect(json<{ nodes: RolloutNodeView[] }>(listed).nodes).toEqual([expect.objectContaining({ node_id: nodes.full, status: 'rolled_back', upgrade_phase: 'rolled_back', previous_version: '1.1.0' })])
        expect(await binaryVersion(nodes.full)).toBe('1.1.0')
      },
    )

    itOn('sqlite', 'rollout-group pause and resume (passed on to the component rollout), skip without --yes (no terminal: nothing asked): the group goes on and completes', { timeout: 240_000 }, async () => {
      // The full node runs 1.1.0 again: a group whose one component is the 1.0.0 release, with a
      // health wait several times what the commands up to the skip take on a loaded machine, so the
      // pause and the resume find the component's one batch running (its rollout takes the pause,
      // resume and the skip's cancel once the wait ends, which is what the skip then waits for).
      // The four commands in the window (pause, status, resume, skip, with the waits between them)
      // took about 5 s with two cores at a load average of 19: 15 s is three times that.
      await untilHealthy(nodes.full)
      const created = await run(['rollout-group', 'create', '--chain', 'devnet', '--node-type', 'full', '--failure-policy', 'manual', '--component', 'devnet-node:1.0.0', '--health-wait', '15s', '--json'])
      expect(created.exitCode, created.stderr).toBe(0)
      const group = json<RolloutGroupStatusView>(created)
      const notRunning = await run(['rollout-group', 'pause', '--id', group.id])
      expect(notRunning.exitCode).toBe(4)
      const started = await run(['rollout-group', 'start', '--id', group.id])
      expect(started.exitCode, started.stderr).toBe(0)

      const pause = await run(['rollout-group', 'pause', '--id', group.id, '--json'])
      expect(pause.exitCode, pause.stderr).toBe(0)
      expect(json<RolloutGroupView>(pause).id).toBe(group.id)
      await untilGroup(group.id, 'paused')
      const paused = await run(['rollout-group', 'status', '--id', group.id])
      expect(paused.exitCode, paused.stderr).toBe(0)
      expect(paused.stdout).toMatch(/status: +paused \(operator\)/)
      expect(paused.stdout).toContain(`nodeplane rollout-group resume --id ${group.id}`)

      const resume = await run(['rollout-group', 'resume', '--id', group.id])
      expect(resume.exitCode, resume.stderr).toBe(0)
      expect(resume.stdout.trim()).toBe(`Rollout group ${group.id} resumes. Follow it with \`nodeplane rollout-group status --id ${group.id}\`.`)
      await untilGroup(group.id, 'running')

      const skip = await run(['rollout-group', 'skip', '--id', group.id, '--yes'])
      expect(skip.exitCode, skip.stderr).toBe(0)
      expect(skip.stdout.trim()).toBe(`Rollout group ${group.id} skips its current component and goes on with the next. Follow it with \`nodeplane rollout-group status --id ${group.id}\`.`)
      await untilGroup(group.id, 'completed')
      const done = await run(['rollout-group', 'status', '--id', group.id, '--json'])
      expect(done.exitCode, done.stderr).toBe(0)
      const view = json<RolloutGroupStatusView>(done)
      expect(view.status).toBe('completed')
      // The component's rollout was cancelled by the skip, or had completed before it landed.
      expect(view.components).toEqual([expect.objectContaining({ component_index: 0, rollout_id: expect.any(String), status: expect.stringMatching(/^(cancelled|completed)$/) })])
      const late = await run(['rollout-group', 'skip', '--id', group.id, '--yes'])
      expect(late.exitCode).toBe(4)
    })
  })
}
