/**
 * Issue 20, items 5, 6, 9 and 10, through the built binary against an api-server (the daemon's
 * start function, in this process) on both databases: what an operator reads in the terminal.
 * Ages instead of timestamps; tables with short unique ids, cut to the width and coloured on a
 * terminal (a pseudo-terminal from util-linux `script`), whole and plain in a pipe or with
 * --wide, NO_COLOR honoured, the ink live view included; the rollout live view's waits (a health
 * wait's countdown, the canary gate after approval) with batches numbered alike in header and
 * rows; signals refused before anyone is asked; and the one rule for repeats (an API key, a
 * rollout, a group).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startApiServer } from '../../daemons/api-server.js'
import { createApiKey } from '../../src/auth/api-keys.js'
import { createLocalBus } from '../../src/events/local-bus.js'
import { raiseIncident } from '../../src/health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../../src/health/incident-rules.js'
import { insertHost, recordProbe } from '../../src/hosts/store.js'
import { createLogger } from '../../src/log.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { writeConfigState } from '../../src/provisioning/configure.js'
import { insertRollout, insertRolloutGroup, insertRolloutNodes } from '../../src/rollouts/store.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'
import { onTerminal, plain } from '../helpers/pty.js'

// eslint-disable-next-line no-control-regex
const COLOUR = /\u001b\[(3[0-7]|9[0-7])m/
const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T

describe.each(DIALECTS)('what operators read in the terminal, on %s', (dialect) => {
  let t: TestDatabase
  let stop: () => Promise<void>
  let env: Record<string, string>
  const dir = tempDir()
  const nodes: string[] = []
  let paused: { id: string }
  let pending: { id: string }
  let spareKey: { id: string }
  let aliceId: string
  let incidentId: string
  const run = (args: string[], extra: Record<string, string> = {}) => nodeplane(args, { cwd: dir, env: { ...env, ...extra } })
  // A 160-column terminal of an operator (colours on, whatever CI says).
  const tty = (args: string[], extra: Record<string, string> = {}) => onTerminal(args, { env: { ...env, ...extra }, cwd: dir, columns: 160, withoutCi: true })

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    const bus = createLocalBus()
    const started = await startApiServer(
      { API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1', HTTP_BODY_LIMIT_BYTES: 1024 * 1024, NODEPLANE_DATA_DIR: path.join(dir, 'data') },
      { db: t.db, bus, logger: createLogger({ level: 'silent' }) },
    )
    stop = async () => (await started.stop(), await bus.close())
    const now = new Date()
    const alice = await insertUser(t.db)
    aliceId = alice
    await t.db('users').where({ id: alice }).update({ is_admin: true })
    // Made in the same millisecond: UUIDv7 ids sharing their time prefix, told apart only by the random part.
    for (const state of ['healthy', 'down']) {
      const n = await insertNode(t.db, { subscription_id: await insertSubscription(t.db, alice), chain_profile_id: 'devnet', node_type: 'full' }, now)
      await t.db('nodes').where({ id: n.id }).update({ state, last_heartbeat: new Date(now.getTime() - 45_000) })
      await writeConfigState(t.db, n.id, '1.0.0', null)
      nodes.push(n.id)
      if (state === 'down') {
        const raised = await t.db.transaction((trx) =>
          raiseIncident(trx, { nodeId: n.id, subscriptionId: n.subscription_id, chainProfileId: 'devnet', category: 'node_down', occurredAt: now, title: 'node down', description: 'test', metadata: { trigger: 'test' } }, DEFAULT_INCIDENT_SETTINGS.flapping, now),
        )
        incidentId = raised.incident.id
      }
    }
    const rollout = { node_type: 'full', binary_name: 'devnet-node', source_version: '1.0.0', target_version: '1.1.0', target_binary_url: 'file:///x', target_binary_checksum: `sha256:${'a'.repeat(64)}`, batch_size: 1, failure_threshold: 0.5, created_by: alice }
    // Past its approved canary, paused by an operator while batch 2's node validates (its health wait runs).
    const p = await insertRollout(t.db, { ...rollout, chain_profile_id: 'devnet', strategy: 'canary', canary_size: 1, health_wait_duration_ms: 300_000, migration_type: 'breaking' }, now)
    await insertRolloutNodes(t.db, p.id, [{ node_id: nodes[0] as string, batch_index: 0 }, { node_id: nodes[1] as string, batch_index: 1 }], now)
    await t.db('rollouts').where({ id: p.id }).update({ status: 'paused', pause_reason: 'operator', current_batch: 1, batch_count: 2, total_nodes: 2, succeeded_nodes: 1, started_at: now })
    await t.db('rollout_nodes').where({ rollout_id: p.id, batch_index: 0 }).update({ status: 'succeeded', upgrade_phase: 'completed', attempt_count: 1, completed_at: now })
    await t.db('rollout_nodes').where({ rollout_id: p.id, batch_index: 1 }).update({ status: 'validating', upgrade_phase: 'verifying', attempt_count: 1, updated_at: new Date() })
    paused = p
    pending = await insertRollout(t.db, { ...rollout, chain_profile_id: 'anvil', strategy: 'rolling', canary_size: null, health_wait_duration_ms: 2_000 }, now)
    // A fleet host probed 12 s ago: its table says so as an age, not as a timestamp.
    const host = await insertHost(t.db, { id: crypto.randomUUID(), name: 'fra-1', address: '10.0.0.2', port: 22, user: 'root', region: 'eu-central', rootDir: '/srv/nodeplane', capacity: { cpu: 8, memory_bytes: 2 ** 35, disk_bytes: 2 ** 39 }, labels: {}, hostKeyFingerprint: 'SHA256:test', now })
    await recordProbe(t.db, host.id, 'ok', null, new Date(now.getTime() - 12_000))
    const scopes = ['nodes:read', 'nodes:write', 'api-keys:manage', 'admin']
    const issued = await t.db.transaction((trx) => createApiKey(trx, { userId: alice, name: 'alice', scopes, expiresAt: null, allowAdmin: true }, new Date()))
    spareKey = (await t.db.transaction((trx) => createApiKey(trx, { userId: alice, name: 'spare', scopes: ['nodes:read'], expiresAt: null }, new Date()))).apiKey
    // The runner's own terminal settings must not leak in: each call sets what it needs.
    env = { NODEPLANE_API_URL: started.url, NODEPLANE_API_KEY: issued.key, HOME: dir, TERM: 'xterm-256color', NO_COLOR: '', COLUMNS: '' }
  })
  afterAll(async () => {
    await stop?.()
    await t?.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('tables: short unique ids, ages (host probes too), the version and coloured states on a terminal; whole, plain and cut only to COLUMNS in a pipe; --wide whole', { timeout: 90_000 }, async () => {
    const [coloured, noColour, piped, narrow, wide, hosts] = await Promise.all([
      tty(['node', 'list']),
      tty(['node', 'list'], { NO_COLOR: '1' }),
      run(['node', 'list']),
      run(['rollout', 'list'], { COLUMNS: '110' }),
      run(['rollout', 'list', '--wide'], { COLUMNS: '110' }),
      tty(['host', 'list']),
    ])
    expect(coloured.exitCode, coloured.stdout).toBe(0)
    const rows = plain(coloured.stdout).split('\n').filter((l) => l.includes('devnet'))
    expect(plain(coloured.stdout).split('\n')[0]).toMatch(/^ID +CHAIN +TYPE +VERSION +DISPLAY STATE +STATE +SYNC +APP HEALTH +LAST HEARTBEAT$/)
    const printed = rows.map((l) => l.split(/\s+/)[0] as string)
    expect(printed).toHaveLength(2)
    for (const id of printed) {
      expect(id.length).toBeGreaterThanOrEqual(8)
      expect(id.length).toBeLessThan(36)
      expect(nodes.some((n) => n.startsWith(id))).toBe(true)
    }
    expect(new Set(printed).size).toBe(2)
    expect(rows.every((l) => /devnet +full +1\.0\.0 /.test(l) && /\d+s ago$/.test(l))).toBe(true)
    expect(coloured.stdout).toContain('\u001b[31mdown\u001b[39m')
    expect(coloured.stdout).toContain('\u001b[32mhealthy\u001b[39m')
    expect(noColour.stdout).not.toMatch(COLOUR)
    expect(plain(noColour.stdout)).toContain(printed[0])

    // What the table printed is what a command takes back.
    const shown = await run(['node', 'show', printed[1] as string, '--json'])
    expect(shown.exitCode, shown.stderr).toBe(0)
    expect(json<{ id: string }>(shown).id).toBe(nodes.find((n) => n.startsWith(printed[1] as string)))

    expect(piped.stdout).not.toMatch(COLOUR)
    for (const id of nodes) expect(piped.stdout).toContain(id)
    expect(narrow.exitCode, narrow.stderr).toBe(0)
    const narrowLines = narrow.stdout.trimEnd().split('\n')
    expect(narrowLines.every((l) => l.length <= 110)).toBe(true)
    expect(narrow.stdout).toContain('…')
    expect(narrow.stdout).toContain(paused.id)
    expect(wide.stdout).toContain('devnet-node 1.0.0 -> 1.1.0')
    expect(wide.stdout.split('\n').some((l) => l.length > 110)).toBe(true)
    // The probe column is an age too (full timestamps only in --json).
    expect(hosts.exitCode, hosts.stdout).toBe(0)
    expect(plain(hosts.stdout)).toMatch(/^fra-1 +ready +eu-central +root@10\.0\.0\.2:22 .* ok 1\ds ago /m)
    expect(plain(hosts.stdout)).not.toMatch(/\d{4}-\d\d-\d\d/)
  })

  it('the live view shows the health wait counting down, the approved canary gate, batches numbered alike, and no colour under NO_COLOR', { timeout: 90_000 }, async () => {
    const [live, liveNoColour, lines] = await Promise.all([
      tty(['rollout', 'status', paused.id, '--watch']),
      tty(['rollout', 'status', paused.id, '--watch'], { NO_COLOR: '1' }),
      run(['rollout', 'status', paused.id, '--watch']),
    ])
    expect(live.exitCode, live.stdout).toBe(6)
    expect(live.stdout).toMatch(COLOUR)
    expect(liveNoColour.exitCode).toBe(6)
    expect(liveNoColour.stdout).not.toMatch(COLOUR)
    const view = plain(live.stdout)
    expect(view).toContain('paused (operator)   batch 2/2')
    expect(view).toMatch(/batch 1 \(canary\) +1 succeeded/)
    expect(view).toMatch(/batch 2 +1 validating/)
    expect(view).toMatch(new RegExp(`${nodes[1]} +validating +verifying  health wait until \\S+ \\S+Z \\(4m\\d+s left\\)`))
    expect(view).toContain('Canary gate: approved')
    expect(view).not.toContain('not reached yet')
    // Without a terminal: one line per change, the wait said there too.
    expect(lines.exitCode).toBe(6)
    expect(lines.stdout).toContain(`rollout ${paused.id} paused (operator), batch 2/2`)
    expect(lines.stdout).toMatch(new RegExp(`node ${nodes[1]} \\(batch 2\\) validating, phase verifying; health wait until \\S+ \\S+Z \\(4m\\d+s left\\)`))
  })

  it('refuses a signal the rollout\'s state forbids before asking, and says to resume before approving a paused canary', { timeout: 60_000 }, async () => {
    const [rollback, rollbackTty, approve] = await Promise.all([
      run(['rollout', 'rollback', pending.id]),
      tty(['rollout', 'rollback', pending.id]),
      run(['rollout', 'approve-canary', paused.id, '--json']),
    ])
    expect(rollback.exitCode).toBe(4)
    expect(rollback.stderr).toBe(`Error: cannot rollback rollout ${pending.id}: it is pending\n  only a running or paused rollout can be rolled back`)
    expect(rollbackTty.exitCode).toBe(4)
    expect(rollbackTty.stdout).not.toContain('[y/N]')
    expect(json<{ error: { message: string; details: string; exit_code: number } }>(approve).error).toEqual(
      expect.objectContaining({ message: `cannot approve canary rollout ${paused.id}: it is paused`, details: 'it is paused: resume it first; its canary gate then waits for the approval again', exit_code: 4 }),
    )
    expect(await t.db('rollouts').whereIn('id', [pending.id, paused.id]).orderBy('chain_profile_id').pluck('status')).toEqual(['pending', 'paused'])
    expect(Number((await t.db('workflow_signals').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('a repeat succeeds and says nothing changed: a second api-key revoke, exit 0, changed false, without asking', { timeout: 60_000 }, async () => {
    const first = await run(['api-key', 'revoke', spareKey.id, '--yes', '--json'])
    expect(first.exitCode, first.stderr).toBe(0)
    expect(json<{ changed: boolean; revoked_at: string }>(first)).toMatchObject({ id: spareKey.id, changed: true })
    const revokedAt = (await t.db('api_keys').where({ id: spareKey.id }).first('revoked_at')).revoked_at as unknown
    const [again, againJson] = await Promise.all([run(['api-key', 'revoke', spareKey.id]), run(['api-key', 'revoke', spareKey.id, '--json'])])
    expect(again.exitCode, again.stderr).toBe(0)
    expect(again.stdout).toMatch(new RegExp(`^API key ${spareKey.id} \\(spare\\) was already revoked (just now|\\d+s ago); nothing changed\\.$`))
    expect(json<{ changed: boolean }>(againJson)).toMatchObject({ id: spareKey.id, changed: false })
    expect((await t.db('api_keys').where({ id: spareKey.id }).first('revoked_at')).revoked_at).toEqual(revokedAt)
  })

  it('a repeated rollout or group signal succeeds and says nothing changed, without asking; one the state forbids exits 4 saying what to do; of two acks at once one changed it', { timeout: 60_000 }, async () => {
    const now = new Date()
    const base = { node_type: 'full', binary_name: 'litecoind', source_version: '1.0.0', target_version: '1.1.0', target_binary_url: 'file:///x', target_binary_checksum: `sha256:${'b'.repeat(64)}`, batch_size: 1, failure_threshold: 0.5, health_wait_duration_ms: 2_000, created_by: aliceId }
    const rollingBack = await insertRollout(t.db, { ...base, chain_profile_id: 'litecoin', strategy: 'rolling', canary_size: null }, now)
    await t.db('rollouts').where({ id: rollingBack.id }).update({ status: 'paused', pause_reason: 'rollback', started_at: now })
    const awaiting = await insertRollout(t.db, { ...base, chain_profile_id: 'bitcoin', strategy: 'canary', canary_size: 1, migration_type: 'breaking' }, now)
    await t.db('rollouts').where({ id: awaiting.id }).update({ status: 'running', awaiting: 'approve_canary', current_batch: 0, batch_count: 2, started_at: now })
    const group = await insertRolloutGroup(t.db, { chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [], desired_versions: {}, strategy: 'rolling', batch_size: 1, canary_size: null, failure_threshold: 0.5, health_wait_duration_ms: 2_000, created_by: aliceId }, now)
    await t.db('rollout_groups').where({ id: group.id }).update({ status: 'paused', pause_reason: 'operator' })
    const versions = async () => t.db('rollouts').orderBy('id').select('id', 'version', 'updated_at')
    const before = await versions()

    const [pause, rollback, groupPause, resume, ackOne, ackTwo] = await Promise.all([
      run(['rollout', 'pause', paused.id]),
      // Destructive, on a terminal, without --yes: a repeat is not asked about.
      tty(['rollout', 'rollback', rollingBack.id]),
      run(['rollout-group', 'pause', group.id, '--json']),
      run(['rollout', 'resume', awaiting.id]),
      // Two operators acknowledging one incident at once: the API says which of them changed it.
      run(['incident', 'ack', incidentId, '--json']),
      run(['incident', 'ack', incidentId, '--json']),
    ])
    expect(pause.exitCode, pause.stderr).toBe(0)
    expect(pause.stdout).toBe(`Rollout ${paused.id} was already paused; nothing changed.`)
    expect(rollback.exitCode, rollback.stdout).toBe(0)
    expect(rollback.stdout).not.toContain('[y/N]')
    expect(plain(rollback.stdout).trim()).toBe(`Rollout ${rollingBack.id} was already being rolled back; nothing changed.`)
    expect(groupPause.exitCode, groupPause.stderr).toBe(0)
    expect(json<{ id: string; status: string; changed: boolean }>(groupPause)).toMatchObject({ id: group.id, status: 'paused', changed: false })
    expect(resume.exitCode).toBe(4)
    expect(resume.stderr).toBe(`Error: cannot resume rollout ${awaiting.id}: it is running: it is not paused: its canary gate waits for your approval; approve it with \`nodeplane rollout approve-canary ID\`, or cancel or roll it back`)
    const acks = [ackOne, ackTwo].map((r) => json<{ acknowledged: Array<{ id: string; changed: boolean }> }>(r).acknowledged)
    expect([ackOne.exitCode, ackTwo.exitCode]).toEqual([0, 0])
    expect(acks.map((a) => a.map((i) => i.id))).toEqual([[incidentId], [incidentId]])
    expect(acks.map((a) => a[0]?.changed).sort()).toEqual([false, true])
    // Nothing sent to any workflow, nothing written.
    expect(Number((await t.db('workflow_signals').count({ n: '*' }).first())?.n)).toBe(0)
    expect(await versions()).toEqual(before)
    expect((await t.db('rollout_groups').where({ id: group.id }).first('version')).version).toBe(1)
  })
})
