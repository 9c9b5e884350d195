/**
 * `nodeplane uptime report` against `nodeplane up`: state-log rows and hourly buckets are written
 * straight into up's SQLite database (nodes that ended two hours ago, so nothing the running
 * daemons do can change their figures), then read through the CLI as a user and as the admin.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { insertSubscription } from '../helpers/fixtures.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'

const HOUR = 3_600_000

interface Figures {
  uptime_percentage: number | null
  uptime_seconds: number
  downtime_seconds: number
}
interface Report {
  nodes: Array<{ node_id: string; state: string; windows: Record<'24h' | '7d' | '30d', Figures>; daily: Array<{ period_start: string; uptime_seconds: number }> }>
  check?: { min: number; window: string; below: string[] }
}

/**
 * A node healthy for the 70 hours from `start`, down during the hours listed (in maintenance for
 * a rollout, planned, during those of `plannedHours`), then terminated (two hours before the
 * current one): its log and the complete buckets the worker would write.
 */
async function endedNode(db: Db, userId: string, start: number, downHours: readonly number[], plannedHours: readonly number[] = []): Promise<string> {
  const subscriptionId = await insertSubscription(db, userId, new Date(start))
  const id = (await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date(start))).id
  const end = start + 70 * HOUR
  await db('nodes').where({ id }).update({ state: 'terminated', state_changed_at: new Date(end) })
  await db('uptime_state_log').where({ node_id: id }).del()
  const log: Array<{ state: string; from: number; to: number | null }> = []
  let cursor = start
  for (const h of downHours) {
    log.push({ state: 'healthy', from: cursor, to: start + h * HOUR }, { state: plannedHours.includes(h) ? 'maintenance' : 'down', from: start + h * HOUR, to: start + (h + 1) * HOUR })
    cursor = start + (h + 1) * HOUR
  }
  log.push({ state: 'healthy', from: cursor, to: end }, { state: 'terminated', from: end, to: null })
  await db('uptime_state_log').insert(log.map((l) => ({ node_id: id, state: l.state, entered_at: new Date(l.from), exited_at: l.to === null ? null : new Date(l.to), trigger: l.state === 'maintenance' ? 'upgrade: upgrade to 1.2.0 (rollout 0193)' : 'test' })))
  const buckets = Array.from({ length: 70 }, (_, h) => {
    const down = downHours.includes(h)
    return { node_id: id, bucket_hour: new Date(start + h * HOUR), uptime_seconds: down ? 0 : 3600, downtime_seconds: down ? 3600 : 0, planned_downtime_seconds: plannedHours.includes(h) ? 3600 : 0, unknown_seconds: 0, total_seconds: 3600, is_complete: true, computed_at: new Date(end) }
  })
  await db('uptime_hourly_buckets').insert(buckets)
  return id
}

describe('uptime report (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let aliceEnv: Record<string, string>
  let perfect: string
  let flaky: string
  let bobs: string

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: await upPorts() })
    await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const ids: string[] = []
    for (const email of ['alice@example.test', 'bob@example.test']) {
      const user = await run(['user', 'create', '--email', email, '--json'])
      expect(user.exitCode, user.stderr).toBe(0)
      ids.push(json<{ id: string }>(user).id)
    }
    const issued = await run(['api-key', 'issue', '--user', ids[0]!, '--name', 'sla', '--scopes', 'nodes:read', '--json'])
    expect(issued.exitCode, issued.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }

    const db = createDatabase(`sqlite://${path.join(dir, '.nodeplane', 'control-plane.db')}`)
    try {
      const start = Math.floor(Date.now() / HOUR) * HOUR - 72 * HOUR
      perfect = await endedNode(db, ids[0]!, start, [])
      // One hour down inside the last 24 hours, one two days before: a rollout's maintenance.
      flaky = await endedNode(db, ids[0]!, start, [20, 60], [20])
      bobs = await endedNode(db, ids[1]!, start, [0, 1, 2, 3, 4, 5, 6])
    } finally {
      await db.destroy()
    }
  }, 90_000)

  afterAll(async () => {
    up?.kill('SIGTERM')
    const stopped = up ? await up : undefined
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
    if (stopped) expect(stopped.exitCode).toBe(143)
  })

  it('reports one node with --json: the three windows and 30 days by day', async () => {
    const result = await run(['uptime', 'report', '--node', flaky, '--json'], aliceEnv)
    expect(result.exitCode, result.stderr).toBe(0)
    const report = json<Report>(result)
    expect(report.nodes).toHaveLength(1)
    const node = report.nodes[0]!
    expect(node).toMatchObject({ node_id: flaky, state: 'terminated' })
    // 24h: the 21 hours before the node ended, one of them down. 30d: 68 of 70 hours up.
    expect(node.windows['24h']).toMatchObject({ uptime_percentage: 95.238, uptime_seconds: 20 * 3600, downtime_seconds: 3600 })
    // The SLA figure counts both hours; the split shows the rollout's apart.
    expect(node.windows['30d']).toMatchObject({ uptime_percentage: 97.142, uptime_seconds: 68 * 3600, downtime_seconds: 2 * 3600, planned_downtime_seconds: 3600, unplanned_downtime_seconds: 3600 })
    expect(node.windows['24h']).toMatchObject({ planned_downtime_seconds: 0, unplanned_downtime_seconds: 3600 })
    expect(node.daily.length).toBeGreaterThanOrEqual(30)
    expect(node.daily.reduce((sum, d) => sum + d.uptime_seconds, 0)).toBe(68 * 3600)
    expect(report.check).toBeUndefined()
  })

  it("shows a user only their own nodes and answers another user's node as not found", async () => {
    const mine = json<Report>(await run(['uptime', 'report', '--json'], aliceEnv))
    expect(mine.nodes.map((n) => n.node_id).sort()).toEqual([perfect, flaky].sort())
    const foreign = await run(['uptime', 'report', '--node', bobs, '--json'], aliceEnv)
    expect(foreign.exitCode).toBe(3)
    expect(json<{ error: { message: string } }>(foreign).error.message).toContain(bobs)
  })

  it('prints a table and a bar per day without a terminal', async () => {
    const result = await run(['uptime', 'report'], aliceEnv)
    expect(result.exitCode, result.stderr).toBe(0)
    const lines = result.stdout.split('\n')
    expect(lines[0]).toMatch(/^NODE\s+CHAIN\s+STATE\s+24H\s+7D\s+30D\s+PLANNED 30D\s+UNPLANNED 30D$/)
    expect(result.stdout).toMatch(new RegExp(`^${flaky}\\s+devnet\\s+terminated\\s+95\\.238%\\s+97\\.142%\\s+97\\.142%\\s+1h\\s+1h$`, 'm'))
    expect(result.stdout).toMatch(new RegExp(`^${perfect}\\s+devnet\\s+terminated\\s+100\\.000%\\s+100\\.000%\\s+100\\.000%\\s+0s\\s+0s$`, 'm'))
    expect(result.stdout).toContain('Uptime per UTC day, last 30 days (2 nodes together)')
    expect(result.stdout).toMatch(/^\d{4}-\d{2}-\d{2}  █{40}  100\.000%$/m)
    // The 26 or 27 days of the window before the nodes existed (by the time of day): one line, not
    // that many empty bars; at most one more, today's, if they ended before it began.
    expect(result.stdout).toMatch(/^\d{4}-\d{2}-\d{2} to \d{4}-\d{2}-\d{2}  no data \(2[67] days\)$/m)
    expect(result.stdout.split('\n').filter((l) => l.includes('no data')).length).toBeLessThanOrEqual(2)
  })

  it('exits 5 with --min when a node is below it, 0 when none is; the admin sees every node', async () => {
    const strict = await run(['uptime', 'report', '--min', '99.9', '--json'], aliceEnv)
    expect(strict.exitCode).toBe(5)
    expect(json<Report>(strict).check).toEqual({ min: 99.9, window: '30d', below: [flaky] })
    const text = await run(['uptime', 'report', '--min', '99.9'], aliceEnv)
    expect(text.exitCode).toBe(5)
    expect(text.stdout).toContain(`1 node(s) below 99.9% over 30d: ${flaky}`)

    const lenient = await run(['uptime', 'report', '--min', '95', '--window', '24h', '--json'], aliceEnv)
    expect(lenient.exitCode, lenient.stderr).toBe(0)
    expect(json<Report>(lenient).check?.below).toEqual([])

    // No key given: the stack's admin key; bob's node (7 of 70 hours down) is in the fleet too.
    const fleet = await run(['uptime', 'report', '--min', '99', '--json'])
    expect(fleet.exitCode).toBe(5)
    const report = json<Report>(fleet)
    expect(report.nodes.map((n) => n.node_id)).toEqual(expect.arrayContaining([perfect, flaky, bobs]))
    expect(report.check?.below.sort()).toEqual([flaky, bobs].sort())

    const bad = await run(['uptime', 'report', '--min', 'lots'], aliceEnv)
    expect(bad.exitCode).toBe(2)
    expect(bad.stderr).toContain('--min must be a percentage')
  })
})
