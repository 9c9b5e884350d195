import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { raiseIncident, type Incident } from '../../src/health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS, incidentTitle, type IncidentCategory } from '../../src/health/incident-rules.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'

interface ErrorOutput {
  error: { name: string; message: string; exit_code: number }
}

/**
 * `incident list|show|ack|resolve` over the API against one `nodeplane up`. The incidents are
 * raised straight into the stack's database with the domain function the consumer uses, on
 * `failed` nodes (terminal: no evaluation moves them, and failures never auto-resolve), so what
 * is under test is the commands.
 */
describe('incident commands (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  let aliceEnv: Record<string, string>
  let readerEnv: Record<string, string>
  let alice: { down: Incident; stalled: Incident; failed: Incident; other: Incident }
  let strangers: Incident

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  async function incident(userId: string, category: IncidentCategory, at: Date): Promise<Incident> {
    const subscription = await insertSubscription(db, userId, at)
    const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'process' }, at)
    await db('nodes').where({ id: node.id }).update({ state: 'failed' })
    const raised = await db.transaction((trx) =>
      raiseIncident(
        trx,
        { nodeId: node.id, subscriptionId: subscription, chainProfileId: 'devnet', category, occurredAt: at, title: incidentTitle(category, 'devnet', node.id), description: `Node ${node.id}: ${category} (test)`, metadata: { trigger: 'test' } },
        DEFAULT_INCIDENT_SETTINGS.flapping,
        at,
      ),
    )
    return raised.incident
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: await upPorts() })
    const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const user = await run(['user', 'create', '--email', 'oncall@example.test', '--json'])
    expect(user.exitCode, user.stderr).toBe(0)
    const aliceId = json<{ id: string }>(user).id
    const writer = await run(['api-key', 'issue', '--user', aliceId, '--name', 'oncall', '--scopes', 'nodes:read,nodes:write', '--json'])
    expect(writer.exitCode, writer.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(writer).key }
    const reader = await run(['api-key', 'issue', '--user', aliceId, '--name', 'dashboard', '--scopes', 'nodes:read', '--json'])
    readerEnv = { NODEPLANE_API_KEY: json<{ key: string }>(reader).key }

    db = createDatabase(stack.database_url)
    const t0 = Date.now() - 60_000
    alice = {
      down: await incident(aliceId, 'node_down', new Date(t0)),
      stalled: await incident(aliceId, 'sync_stalled', new Date(t0 + 1000)),
      failed: await incident(aliceId, 'provision_failed', new Date(t0 + 2000)),
      other: await incident(aliceId, 'migration_failed', new Date(t0 + 3000)),
    }
    strangers = await incident(await insertUser(db), 'node_down', new Date(t0 + 4000))
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('lists your incidents newest first, filtered; a table for people; an admin key lists everyone\'s; a bad filter exits 2', { timeout: 90_000 }, async () => {
    const listed = await run(['incident', 'list', '--json'], readerEnv)
    expect(listed.exitCode, listed.stderr).toBe(0)
    const incidents = json<{ incidents: Incident[] }>(listed).incidents
    expect(incidents.map((i) => i.id)).toEqual([alice.other.id, alice.failed.id, alice.stalled.id, alice.down.id])
    expect(incidents[3]).toEqual(alice.down)

    const warnings = json<{ incidents: Incident[] }>(await run(['incident', 'list', '--severity', 'warning', '--json'], readerEnv)).incidents
    expect(warnings.map((i) => i.id)).toEqual([alice.stalled.id])
    const byNode = json<{ incidents: Incident[] }>(await run(['incident', 'list', '--node', alice.failed.node_id, '--json'], readerEnv)).incidents
    expect(byNode.map((i) => i.category)).toEqual(['provision_failed'])
    const limited = json<{ incidents: Incident[] }>(await run(['incident', 'list', '--limit', '1', '--json'], readerEnv)).incidents
    expect(limited.map((i) => i.id)).toEqual([alice.other.id])

    const table = await run(['incident', 'list', '--category', 'node_down'], readerEnv)
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^ID\s+SEVERITY\s+STATUS\s+CATEGORY\s+NODE\s+COUNT\s+LAST SEEN\s+TITLE$/)
    expect(lines[2]).toMatch(new RegExp(`^${alice.down.id}\\s+critical\\s+open\\s+node_down\\s+${alice.down.node_id}\\s+1\\s+`))
    expect(lines).toHaveLength(3)
    expect((await run(['incident', 'list', '--status', 'resolved'], readerEnv)).stdout.trim()).toBe('No incidents match these filters.')

    const all = json<{ incidents: Incident[] }>(await run(['incident', 'list', '--json'])).incidents.map((i) => i.id)
    expect(all).toEqual(expect.arrayContaining([strangers.id, alice.down.id]))

    expect((await run(['incident', 'list', '--status', 'closed'], readerEnv)).exitCode).toBe(2)
    const badNode = await run(['incident', 'list', '--node', 'not-a-node'], readerEnv)
    expect(badNode.exitCode).toBe(2)
    expect(badNode.stderr).toContain('query.node_id')
  })

  it("shows one incident; an unknown id or another user's incident exits 3 with one line and a hint", { timeout: 90_000 }, async () => {
    const shown = await run(['incident', 'show', '--id', alice.stalled.id, '--json'], readerEnv)
    expect(shown.exitCode, shown.stderr).toBe(0)
    expect(json(shown)).toEqual(alice.stalled)
    const human = await run(['incident', 'show', '--id', alice.stalled.id], readerEnv)
    expect(human.stdout).toContain(`incident ${alice.stalled.id}`)
    expect(human.stdout).toContain(alice.stalled.title)
    expect(human.stdout).toMatch(/severity:\s+warning/)
    expect(human.stdout).toMatch(/status:\s+open/)

    for (const id of ['00000000-0000-4000-8000-000000000000', strangers.id, 'not-an-incident']) {
      const missing = await run(['incident', 'show', '--id', id], readerEnv)
      expect(missing.exitCode, id).toBe(3)
      const lines = missing.stderr.trim().split('\n')
      expect(lines[0]).toBe(`Error: no incident ${id} among the incidents you can see`)
      expect(lines[1]).toContain('nodeplane incident list')
    }
    const asJson = await run(['incident', 'show', '--id', strangers.id, '--json'], readerEnv)
    expect(json<ErrorOutput>(asJson).error).toMatchObject({ name: 'NotFoundError', exit_code: 3 })
  })

  it('acks several ids, resolves, and exits 4 on moves the status table forbids, 3 for an unknown id, 77 without nodes:write', { timeout: 90_000 }, async () => {
    const denied = await run(['incident', 'ack', '--id', alice.down.id], readerEnv)
    expect(denied.exitCode).toBe(77)

    const acked = await run(['incident', 'ack', '--id', alice.down.id, '--id', alice.stalled.id, '--json'], aliceEnv)
    expect(acked.exitCode, acked.stderr).toBe(0)
    const result = json<{ acknowledged: Incident[]; failed: unknown[] }>(acked)
    expect(result.failed).toEqual([])
    expect(result.acknowledged.map((i) => [i.id, i.status])).toEqual([
      [alice.down.id, 'acknowledged'],
      [alice.stalled.id, 'acknowledged'],
    ])

    // One already acknowledged (a repeat: changed false), one unknown, one open: the open one is still acknowledged.
    const unknown = '00000000-0000-4000-8000-000000000000'
    const mixed = await run(['incident', 'ack', '--id', alice.down.id, '--id', unknown, '--id', alice.failed.id, '--json'], aliceEnv)
    expect(mixed.exitCode, mixed.stdout + mixed.stderr).toBe(3)
    const mixedResult = json<{ acknowledged: Array<Incident & { changed: boolean }>; failed: Array<{ id: string; error: { name: string; exit_code: number } }> }>(mixed)
    expect(mixedResult.acknowledged.map((i) => [i.id, i.status, i.changed])).toEqual([
      [alice.down.id, 'acknowledged', false],
      [alice.failed.id, 'acknowledged', true],
    ])
    expect(mixedResult.failed).toEqual([{ id: unknown, error: expect.objectContaining({ name: 'NotFoundError', exit_code: 3 }) }])
    const human = await run(['incident', 'ack', '--id', unknown], aliceEnv)
    expect(human.exitCode).toBe(3)
    expect(human.stderr.trim()).toBe(`Error: no incident ${unknown} among the incidents you can see`)

    const resolved = await run(['incident', 'resolve', '--id', alice.down.id, '--yes', '--json'], aliceEnv)
    expect(resolved.exitCode, resolved.stderr).toBe(0)
    expect(json<Incident>(resolved)).toMatchObject({ id: alice.down.id, status: 'resolved', resolved_by: expect.any(String) })
    const text = await run(['incident', 'resolve', '--id', alice.other.id, '--yes'], aliceEnv)
    expect(text.stdout.trim()).toBe(`Resolved incident ${alice.other.id}: ${alice.other.title}`)

    // A repeat (docs/cli.md, "Repeats"): exit 0, nothing asked nor changed, and said so; a move the status forbids is 4.
    const again = await run(['incident', 'resolve', '--id', alice.down.id], aliceEnv)
    expect(again.exitCode, again.stderr).toBe(0)
    expect(again.stdout).toMatch(new RegExp(`^Incident ${alice.down.id} was already resolved (just now|\\d+s ago) by \\S+; nothing changed\\.$`))
    const againJson = await run(['incident', 'resolve', '--id', alice.down.id, '--yes', '--json'], aliceEnv)
    expect(json<Incident & { changed: boolean }>(againJson)).toMatchObject({ id: alice.down.id, status: 'resolved', changed: false })
    const ackResolved = await run(['incident', 'ack', alice.down.id], aliceEnv)
    expect(ackResolved.exitCode).toBe(4)
    expect(ackResolved.stderr).toContain(`incident ${alice.down.id} is resolved; it cannot be acknowledged`)

    const notifications = json<{ notifications: Array<{ kind: string; data: Record<string, unknown> }> }>(await run(['notification', 'list', '--json'], aliceEnv)).notifications
    expect(notifications.filter((n) => n.kind === 'incident_resolved').map((n) => n.data.incident_id).sort()).toEqual([alice.down.id, alice.other.id].sort())
  })
})
