/**
 * /api/v1/rollouts and /api/v1/rollout-groups over real HTTP with the api-server's
 * authenticator, on both databases: admin only (401 / 403, a `*` key is not admin), creation in
 * both modes with the views, 400s that write nothing, 404s, the one-active rule under 8
 * concurrent POSTs, the action routes handing over to src/rollouts/control.ts (and the one rule
 * for repeats: 200 with `changed: false`, nothing sent), lists and pages.
 */
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { insertRolloutNodes, updateRolloutNode } from '../../../src/rollouts/store.js'
import type { RolloutDetailView, RolloutGroupStatusView, RolloutGroupView, RolloutNodeView, RolloutView } from '../../../src/rollouts/views.js'
import { DIALECTS } from '../../helpers/db.js'
import { isErrorBody, newKey, newUser, startAuthApi, TestClock } from '../auth/api-harness.js'
import { getJson, Resources } from '../http/harness.js'
import { at, CHECKSUM_110, T0 } from './helpers.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const AUTO = { upgrade_id: 'devnet-1.1.0', chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' }
const MANUAL = {
  chain_profile_id: 'devnet',
  node_type: 'archive',
  source_version: '1.0.0',
  binary_name: 'devnet-node',
  target_version: '1.1.0',
  // The chain profile's own release: the one URL accepted without ARTIFACT_ALLOWED_SOURCES.
  target_binary_url: pathToFileURL(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../chains/devnet/releases/devnet-node-1.1.0.mjs')).href,
  target_binary_checksum: CHECKSUM_110,
}
const GROUP = { chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [{ upgrade_id: 'devnet-1.1.0', binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }] }
const UNKNOWN = '00000000-0000-4000-8000-000000000000'

interface Page<T> {
  items: T[]
  next_cursor: string | null
}

async function setup(dialect: (typeof DIALECTS)[number]) {
  const { db } = await resources.database(dialect)
  const api = await startAuthApi(resources, db, { clock: new TestClock(T0.getTime()), perMinute: 100_000 })
  const admin = await newUser(db, { admin: true })
  const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true, now: api.clock.now() })).key
  // An admin user's `*` key: every scope but admin.
  const starKey = (await newKey(db, admin.id, { scopes: ['*'], now: api.clock.now() })).key
  /** `key` null: no credential at all. */
  const call = (method: string, path: string, body?: unknown, key: string | null = adminKey) =>
    api.call(method, path, { ...(key === null ? {} : { bearer: key }), ...(body === undefined ? {} : { body }) })
  return { db, api, admin, adminKey, starKey, call }
}

async function count(db: Db, table: string): Promise<number> {
  return Number(((await db(table).count({ n: '*' }).first()) as { n: unknown }).n)
}

/** Every route with a path for an existing rollout/group (or an unknown one). */
function allRoutes(rolloutId: string, groupId: string, nodeId: string): [string, string, unknown?][] {
  return [
    ['POST', '/api/v1/rollouts', AUTO],
    ['GET', '/api/v1/rollouts'],
    ['GET', `/api/v1/rollouts/${rolloutId}`],
    ['GET', `/api/v1/rollouts/${rolloutId}/nodes`],
    ...['start', 'pause', 'resume', 'cancel', 'rollback', 'force', 'approve-canary'].map((a): [string, string] => ['POST', `/api/v1/rollouts/${rolloutId}/${a}`]),
    ['POST', `/api/v1/rollouts/${rolloutId}/nodes/${nodeId}/retry`],
    ['POST', '/api/v1/rollout-groups', GROUP],
    ['GET', `/api/v1/rollout-groups/${groupId}`],
    ['GET', `/api/v1/rollout-groups/${groupId}/status`],
    ...['start', 'pause', 'resume', 'cancel', 'skip'].map((a): [string, string] => ['POST', `/api/v1/rollout-groups/${groupId}/${a}`]),
  ]
}

describe.each(DIALECTS)('rollouts API on %s', (dialect) => {
  it('is admin only: 401 without a credential, 403 for a `*` key and for a user key, and nothing is written', async () => {
    const { db, api, starKey, call } = await setup(dialect)
    const user = await newUser(db)
    const userKey = (await newKey(db, user.id, { scopes: ['nodes:read', 'nodes:write'], now: api.clock.now() })).key
    const routes = allRoutes(UNKNOWN, UNKNOWN, UNKNOWN)
    expect(routes).toHaveLength(20)
    for (const [method, path, body] of routes) {
      const anonymous = await call(method, path, body, null)
      expect(anonymous.status, `${method} ${path}`).toBe(401)
      expect(isErrorBody(anonymous.body)).toBe(true)
      for (const key of [starKey, userKey]) {
        const forbidden = await call(method, path, body, key)
        expect(forbidden.status, `${method} ${path}`).toBe(403)
        expect(forbidden.body).toEqual({ error: 'forbidden', details: 'this route requires the scope "admin"' })
      }
    }
    expect(await count(db, 'rollouts')).toBe(0)
    expect(await count(db, 'rollout_groups')).toBe(0)
  })

  it('creates in auto mode (201) and shows the rollout with its counters and node counts; lists with filters and pages', async () => {
    const { db, admin, api, call } = await setup(dialect)
    const created = await call('POST', '/api/v1/rollouts', { ...AUTO, reason: 'gas price RPC' })
    expect(created.status).toBe(201)
    const rollout = created.body as RolloutView
    expect(rollout).toMatchObject({
      status: 'pending',
      upgrade_id: 'devnet-1.1.0',
      binary_name: 'devnet-node',
      target_version: '1.1.0',
      target_binary_checksum: CHECKSUM_110,
      target_binary_url: expect.stringMatching(/^file:\/\/.*\/chains\/devnet\/releases\/devnet-node-1\.1\.0\.mjs$/),
      migration_type: 'non_breaking',
      manifest_content_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      recovery_plan: expect.stringContaining('backup'),
      config_changes: expect.objectContaining({ config_version: 'devnet-1.1.0' }),
      compatible_source_versions: ['1.0.0'],
      strategy: 'rolling',
      batch_size: 10,
      canary_size: null,
      failure_threshold: 0.2,
      health_wait_duration: '5m',
      health_wait_duration_ms: 300_000,
      total_nodes: 0,
      succeeded_nodes: 0,
      failed_nodes: 0,
      created_by: admin.id,
      reason: 'gas price RPC',
      pause_reason: null,
      awaiting: null,
      current_batch: null,
      batch_count: null,
      forced: false,
      error_message: null,
      scheduled_at: null,
      started_at: null,
      completed_at: null,
      version: 1,
      created_at: T0.toISOString(),
      updated_at: T0.toISOString(),
    })

    const shown = await call('GET', `/api/v1/rollouts/${rollout.id}`)
    expect(shown.status).toBe(200)
    expect(shown.body).toEqual({ ...rollout, node_counts: { pending: 0, in_progress: 0, validating: 0, succeeded: 0, failed: 0, rolled_back: 0, skipped: 0 } })
    expect((await call('GET', `/api/v1/rollouts/${rollout.id.toUpperCase()}`)).status).toBe(200)

    const nodeIds = ['00000000-0000-4000-8000-00000000000b', '00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000c']
    await insertRolloutNodes(db, rollout.id, nodeIds.map((node_id, i) => ({ node_id, batch_index: i === 2 ? 0 : 1, previous_version: '1.0.0' })), at(1000))
    await updateRolloutNode(db, rollout.id, nodeIds[0] as string, { status: 'in_progress', upgrade_phase: 'mutating', attempt_count: 1, started_at: at(2000) }, at(2000))
    const nodes1 = (await call('GET', `/api/v1/rollouts/${rollout.id}/nodes?limit=2`)).body as Page<RolloutNodeView>
    expect(nodes1.items.map((n) => [n.batch_index, n.node_id])).toEqual([
      [0, nodeIds[2]],
      [1, nodeIds[1]],
    ])
    const nodes2 = (await call('GET', `/api/v1/rollouts/${rollout.id}/nodes?limit=2&cursor=${nodes1.next_cursor}`)).body as Page<RolloutNodeView>
    expect(nodes2.next_cursor).toBeNull()
    expect(nodes2.items).toEqual([
      {
        id: expect.any(String),
        rollout_id: rollout.id,
        node_id: nodeIds[0],
        batch_index: 1,
        status: 'in_progress',
        upgrade_phase: 'mutating',
        previous_version: '1.0.0',
        previous_binary_url: null,
        previous_checksum: null,
        error_message: null,
        attempt_count: 1,
        started_at: at(2000).toISOString(),
        completed_at: null,
        created_at: at(1000).toISOString(),
        updated_at: at(2000).toISOString(),
      },
    ])
    expect(((await call('GET', `/api/v1/rollouts/${rollout.id}`)).body as RolloutDetailView).node_counts).toMatchObject({ pending: 2, in_progress: 1 })

    // A finished rollout, then a manual one on the same chain; list newest first, filter, page.
    await db('rollouts').where({ id: rollout.id }).update({ status: 'completed' })
    api.clock.advance(60_000)
    const manual = (await call('POST', '/api/v1/rollouts', { ...MANUAL, strategy: 'canary', canary_size: 2, health_wait_duration: '90s' })).body as RolloutView
    expect(manual).toMatchObject({ upgrade_id: null, node_type: 'archive', manifest_content_hash: null, recovery_plan: null, config_changes: null, compatible_source_versions: null, migration_type: 'non_breaking', canary_size: 2, health_wait_duration: '1m30s', health_wait_duration_ms: 90_000 })
    const ids = async (query: string) => ((await call('GET', `/api/v1/rollouts?${query}`)).body as Page<RolloutView>).items.map((r) => r.id)
    expect(await ids('')).toEqual([manual.id, rollout.id])
    expect(await ids('status=completed')).toEqual([rollout.id])
    expect(await ids('chain_profile_id=devnet&status=pending')).toEqual([manual.id])
    expect(await ids('chain_profile_id=other')).toEqual([])
    const page1 = (await call('GET', '/api/v1/rollouts?limit=1')).body as Page<RolloutView>
    expect(page1.items.map((r) => r.id)).toEqual([manual.id])
    const page2 = (await call('GET', `/api/v1/rollouts?limit=1&cursor=${page1.next_cursor}`)).body as Page<RolloutView>
    expect(page2).toEqual({ items: [{ ...rollout, status: 'completed' }], next_cursor: null })
    for (const query of ['status=done', 'limit=0', 'cursor=!!', 'group_id=nope']) {
      const res = await call('GET', `/api/v1/rollouts?${query}`)
      expect(res.status, query).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
    }
  })

  it('answers 400 with {error, details} for bad bodies and writes nothing', async () => {
    const { db, api, adminKey, call } = await setup(dialect)
    const bad: [unknown, string][] = [
      [{ ...AUTO, upgrade_id: 'devnet-9.9.9' }, 'upgrade_id: no file'],
      [{ ...AUTO, upgrade_id: '../../etc/passwd' }, 'body.upgrade_id'],
      [{ ...AUTO, target_version: '2.0.0' }, 'body.target_version: "2.0.0" disagrees with upgrade devnet-1.1.0'],
      [{ ...AUTO, source_version: '0.1.0' }, 'body.source_version: upgrade devnet-1.1.0 applies to 1.0.0, not 0.1.0'],
      [{ ...MANUAL, target_binary_checksum: 'abc' }, 'body.target_binary_checksum: must be sha256:<64 hex digits>'],
      // Without a URL, the artifact store's devnet-node 1.1.0: this server has none configured.
      [{ ...MANUAL, target_binary_url: undefined }, 'body.target_binary_checksum: artifact not found: this server has no artifact store configured'],
      [{ ...MANUAL, strategy: 'fast' }, 'body.strategy'],
      [{ ...MANUAL, failure_threshold: 2 }, 'body.failure_threshold: must be between 0.0 and 1.0'],
      [{ ...MANUAL, health_wait_duration: '5 minutes' }, 'body.health_wait_duration: must be a duration'],
      [{ ...MANUAL, batch_size: 0 }, 'body.batch_size: must be at least 1'],
      [{ ...MANUAL, chain_profile_id: 'nochain' }, 'unknown chain profile "nochain"'],
      [{ ...MANUAL, node_type: 'validator' }, 'chain devnet has no node type "validator"'],
      [{ ...MANUAL, scheduled_at: '2020-01-01T00:00:00Z' }, 'body.scheduled_at: 2020-01-01T00:00:00Z is not in the future'],
      // T0 is 2025-03-01T12:00Z: a schedule may be 30 days ahead at most.
      [{ ...MANUAL, scheduled_at: '2025-03-31T12:00:01Z' }, 'body.scheduled_at: 2025-03-31T12:00:01Z is more than 30 days ahead'],
      [{ ...MANUAL, extra: true }, "Unrecognized key(s) in object: 'extra'"],
    ]
    for (const [body, expected] of bad) {
      const res = await call('POST', '/api/v1/rollouts', body)
      expect(res.status, expected).toBe(400)
      expect(isErrorBody(res.body), expected).toBe(true)
      expect((res.body as { details: string }).details, expected).toContain(expected)
    }
    const badGroups: [unknown, string][] = [
      [{ ...GROUP, failure_policy: undefined }, 'body.failure_policy: is required: partial_ok, rollback_all or manual (there is no default)'],
      [{ ...GROUP, component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '3.0.0' }] }, 'chain devnet has no release 3.0.0'],
      [{ ...GROUP, component_order: [{ upgrade_id: 'missing', binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }] }, 'body.component_order[0].upgrade_id'],
    ]
    for (const [body, expected] of badGroups) {
      const res = await call('POST', '/api/v1/rollout-groups', body)
      expect(res.status, expected).toBe(400)
      expect((res.body as { details: string }).details, expected).toContain(expected)
    }
    const notJson = await getJson(`${api.url}/api/v1/rollouts`, { method: 'POST', headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'text/plain' }, body: 'upgrade_id=devnet-1.1.0' })
    expect(notJson.status).toBe(415)
    expect(await count(db, 'rollouts')).toBe(0)
    expect(await count(db, 'rollout_groups')).toBe(0)
  })

  it('answers 404 for unknown and malformed ids on every id route', async () => {
    const { db, call } = await setup(dialect)
    const rollout = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    for (const id of [UNKNOWN, 'not-an-id']) {
      for (const [method, path] of allRoutes(id, id, UNKNOWN).filter(([, p]) => p.includes(id))) {
        const res = await call(method, path)
        expect(res.status, `${method} ${path}`).toBe(404)
        expect(isErrorBody(res.body)).toBe(true)
      }
    }
    // A node that is not part of the rollout.
    const retry = await call('POST', `/api/v1/rollouts/${rollout.id}/nodes/${UNKNOWN}/retry`)
    expect(retry.status).toBe(409)
    expect(await count(db, 'rollouts')).toBe(1)
    expect(((await call('GET', `/api/v1/rollouts/${rollout.id}`)).body as RolloutView).version).toBe(1)
  })

  it('keeps one active rollout per chain under 8 concurrent POSTs: one 201, seven 409 naming it', async () => {
    const { db, call } = await setup(dialect)
    const answers = await Promise.all(Array.from({ length: 8 }, () => call('POST', '/api/v1/rollouts', AUTO)))
    expect(answers.map((a) => a.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409])
    const winner = answers.find((a) => a.status === 201)?.body as RolloutView
    for (const refused of answers.filter((a) => a.status === 409)) {
      expect(refused.body).toEqual({
        error: `chain devnet already has an active rollout (${winner.id}, pending)`,
        details: `at most one rollout per chain profile may be pending, scheduled, running or paused; finish or cancel rollout ${winner.id} first`,
      })
    }
    expect(await count(db, 'rollouts')).toBe(1)
    const group = await call('POST', '/api/v1/rollout-groups', GROUP)
    expect(group.status).toBe(409)
    expect((group.body as { error: string }).error).toBe(`chain devnet has an active rollout (${winner.id}, pending)`)
  })

  it('starts and signals a rollout through the control functions; refused moves are 409 and change nothing', async () => {
    const { db, call, api } = await setup(dialect)
    const rollout = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    for (const action of ['pause', 'resume', 'rollback', 'force', 'approve-canary']) {
      const refused = await call('POST', `/api/v1/rollouts/${rollout.id}/${action}`)
      expect(refused.status, action).toBe(409)
      expect(isErrorBody(refused.body)).toBe(true)
    }
    api.clock.advance(1000)
    const started = await call('POST', `/api/v1/rollouts/${rollout.id}/start`)
    expect(started.status).toBe(200)
    expect(started.body).toMatchObject({ id: rollout.id, status: 'running', version: 2, started_at: at(1000).toISOString() })
    expect(started.body).toMatchObject({ changed: true })
    // A repeat: the rollout as it is, nothing changed.
    const again = await call('POST', `/api/v1/rollouts/${rollout.id}/start`)
    expect(again).toMatchObject({ status: 200, body: { id: rollout.id, status: 'running', version: 2, changed: false } })

    const paused = await call('POST', `/api/v1/rollouts/${rollout.id}/pause`)
    expect(paused.status).toBe(200)
    // The signal is the workflow's to act on: the answer is the rollout as it is now.
    expect(paused.body).toMatchObject({ status: 'running', version: 2, changed: true })
    expect((await call('POST', `/api/v1/rollouts/${rollout.id}/approve-canary`)).status).toBe(409)

    // A future schedule: start makes it scheduled.
    await db('rollouts').where({ id: rollout.id }).update({ status: 'completed' })
    const later = (await call('POST', '/api/v1/rollouts', { ...MANUAL, scheduled_at: at(3_600_000).toISOString() })).body as RolloutView
    expect(later.scheduled_at).toBe(at(3_600_000).toISOString())
    expect((await call('POST', `/api/v1/rollouts/${later.id}/start`)).body).toMatchObject({ status: 'scheduled', started_at: null })
    // Its time passes (say, while no orchestrator ran): it starts by itself; a second start is a repeat and starts nothing.
    api.clock.advance(2 * 3_600_000)
    const early = await call('POST', `/api/v1/rollouts/${later.id}/start`)
    expect(early).toMatchObject({ status: 200, body: { id: later.id, status: 'scheduled', changed: false } })
    expect(await db('rollouts').where({ id: later.id }).first('status', 'version')).toMatchObject({ status: 'scheduled', version: 2 })
  })

  it('one rule for repeats: a signal whose effect already holds answers 200 with changed false and sends nothing; one the state forbids is 409 saying what to do', async () => {
    const { db, call } = await setup(dialect)
    const rollout = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    expect((await call('POST', `/api/v1/rollouts/${rollout.id}/start`)).status).toBe(200)
    const signals = () => count(db, 'workflow_signals')
    const as = (fields: Record<string, unknown>) => db('rollouts').where({ id: rollout.id }).update(fields)
    const signal = async (action: string) => {
      const before = await db('rollouts').where({ id: rollout.id }).first('version', 'updated_at')
      const sent = await signals()
      const answer = await call('POST', `/api/v1/rollouts/${rollout.id}/${action}`)
      // Neither kind of answer sends or writes anything.
      expect(await signals(), action).toBe(sent)
      expect(await db('rollouts').where({ id: rollout.id }).first('version', 'updated_at'), action).toEqual(before)
      return answer
    }
    const repeat = (status: string) => ({ status: 200, body: { id: rollout.id, status, changed: false } })

    await as({ status: 'paused', pause_reason: 'operator' })
    expect(await signal('pause')).toMatchObject(repeat('paused'))
    await as({ status: 'running', pause_reason: null })
    expect(await signal('resume')).toMatchObject(repeat('running'))
    await as({ forced: true })
    expect(await signal('force')).toMatchObject(repeat('running'))

    await as({ status: 'running', awaiting: 'approve_canary', strategy: 'canary', canary_size: 1, migration_type: 'breaking', current_batch: 0, forced: false })
    expect(await signal('resume')).toMatchObject({
      status: 409,
      body: { error: `cannot resume rollout ${rollout.id}: it is running`, details: 'it is not paused: its canary gate waits for your approval; approve it with `nodeplane rollout approve-canary ID`, or cancel or roll it back' },
    })
    // Past the gate (the rest of the fleet upgrading, or completed): the approval is a repeat.
    await as({ awaiting: null, current_batch: 1 })
    expect(await signal('approve-canary')).toMatchObject(repeat('running'))
    await as({ status: 'completed' })
    expect(await signal('approve-canary')).toMatchObject(repeat('completed'))
    await as({ status: 'paused', pause_reason: 'operator' })
    expect(await signal('approve-canary')).toMatchObject({ status: 409, body: { details: 'it is paused: resume it first; its canary gate then waits for the approval again' } })

    await as({ status: 'paused', pause_reason: 'rollback' })
    expect(await signal('rollback')).toMatchObject(repeat('paused'))
    for (const action of ['pause', 'resume', 'cancel', 'force']) {
      expect(await signal(action), action).toMatchObject({ status: 409, body: { details: 'it is being rolled back: wait for it to end (`nodeplane rollout status ID --watch`)' } })
    }
    await as({ status: 'rolled_back' })
    expect(await signal('rollback')).toMatchObject(repeat('rolled_back'))
    await as({ status: 'cancelled', pause_reason: null })
    expect(await signal('cancel')).toMatchObject(repeat('cancelled'))
    expect(await signal('pause')).toMatchObject({ status: 409, body: { error: `cannot pause rollout ${rollout.id}: it is cancelled`, details: 'only a running rollout can be paused' } })

    const group = (await call('POST', '/api/v1/rollout-groups', { ...GROUP, node_type: 'archive' })).body as RolloutGroupView
    expect((await call('POST', `/api/v1/rollout-groups/${group.id}/start`)).status).toBe(200)
    const groupSignal = async (action: string) => {
      const sent = await signals()
      const answer = await call('POST', `/api/v1/rollout-groups/${group.id}/${action}`)
      expect(await signals(), action).toBe(sent)
      return answer
    }
    expect(await groupSignal('resume')).toMatchObject({ status: 200, body: { id: group.id, status: 'running', changed: false } })
    await db('rollout_groups').where({ id: group.id }).update({ status: 'paused', pause_reason: 'operator' })
    expect(await groupSignal('pause')).toMatchObject({ status: 200, body: { id: group.id, status: 'paused', changed: false } })
    await db('rollout_groups').where({ id: group.id }).update({ status: 'completed', pause_reason: null })
    // skip is never a repeat: each one moves past another component.
    expect(await groupSignal('skip')).toMatchObject({ status: 409, body: { details: 'components are skipped while the group runs or is paused' } })
    expect(await groupSignal('cancel')).toMatchObject({ status: 409, body: { error: `cannot cancel rollout group ${group.id}: it is completed` } })
  })

  it('cancels a pending or a scheduled rollout at once (an extension of the spec), which frees the chain; a cancelled one is not started', async () => {
    const { db, call } = await setup(dialect)
    const pending = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    const cancelled = await call('POST', `/api/v1/rollouts/${pending.id}/cancel`)
    expect(cancelled).toMatchObject({ status: 200, body: { id: pending.id, status: 'cancelled', started_at: null } })
    expect(await call('POST', `/api/v1/rollouts/${pending.id}/cancel`)).toMatchObject({ status: 200, body: { id: pending.id, status: 'cancelled', changed: false } })
    expect((await call('POST', `/api/v1/rollouts/${pending.id}/start`)).status).toBe(409)
    const events = (await db('outbox').where({ subject: `events.rollout.${pending.id}.completed` }).select('payload')) as Array<{ payload: unknown }>
    expect(events.map((e) => (typeof e.payload === 'string' ? JSON.parse(e.payload) : e.payload))).toEqual([expect.objectContaining({ rollout_id: pending.id, status: 'cancelled' })])

    const later = (await call('POST', '/api/v1/rollouts', { ...MANUAL, scheduled_at: at(3_600_000).toISOString() })).body as RolloutView
    expect((await call('POST', `/api/v1/rollouts/${later.id}/start`)).body).toMatchObject({ status: 'scheduled' })
    expect(await call('POST', `/api/v1/rollouts/${later.id}/cancel`)).toMatchObject({ status: 200, body: { id: later.id, status: 'cancelled' } })
    expect((await call('POST', '/api/v1/rollouts', AUTO)).status).toBe(201)
  })

  it('creates, shows and starts a group; status shows each component not_started until its rollout exists', async () => {
    const { db, admin, call } = await setup(dialect)
    const created = await call('POST', '/api/v1/rollout-groups', { ...GROUP, health_wait_duration: '2m', batch_size: 5 })
    expect(created.status).toBe(201)
    const group = created.body as RolloutGroupView
    expect(group).toMatchObject({
      status: 'pending',
      failure_policy: 'manual',
      desired_versions: { 'devnet-node': '1.1.0' },
      component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0', upgrade_id: 'devnet-1.1.0', checksum: CHECKSUM_110, migration_type: 'non_breaking', url: expect.stringMatching(/^file:\/\//) }],
      health_wait_duration: '2m',
      health_wait_duration_ms: 120_000,
      batch_size: 5,
      created_by: admin.id,
      current_component_index: null,
    })
    expect((await call('GET', `/api/v1/rollout-groups/${group.id}`)).body).toEqual(group)
    const status = (await call('GET', `/api/v1/rollout-groups/${group.id}/status`)).body as RolloutGroupStatusView
    expect(status.components).toEqual([
      { component_index: 0, binary_name: 'devnet-node', node_type: 'full', version: '1.1.0', upgrade_id: 'devnet-1.1.0', rollout_id: null, status: 'not_started', total_nodes: 0, succeeded_nodes: 0, failed_nodes: 0, started_at: null, completed_at: null },
    ])
    expect(await count(db, 'rollouts')).toBe(0)
    for (const signal of ['pause', 'resume', 'skip']) {
      expect((await call('POST', `/api/v1/rollout-groups/${group.id}/${signal}`)).status, signal).toBe(409)
    }
    const second = await call('POST', '/api/v1/rollout-groups', GROUP)
    expect(second.status).toBe(409)
    expect((second.body as { error: string }).error).toBe(`chain devnet already has an active rollout group (${group.id}, pending)`)

    const started = await call('POST', `/api/v1/rollout-groups/${group.id}/start`)
    expect(started.status).toBe(200)
    expect(started.body).toMatchObject({ status: 'running', current_component_index: 0, version: 2 })
    expect((await call('POST', `/api/v1/rollout-groups/${group.id}/start`)).body).toMatchObject({ status: 'running', version: 2, changed: false })
    expect((await call('POST', `/api/v1/rollout-groups/${group.id}/pause`)).body).toMatchObject({ status: 'running', changed: true })
  })

  it('cancels a pending group at once, which frees the chain for another', async () => {
    const { call } = await setup(dialect)
    const created = await call('POST', '/api/v1/rollout-groups', GROUP)
    expect(created.status).toBe(201)
    const id = (created.body as { id: string }).id
    const cancelled = await call('POST', `/api/v1/rollout-groups/${id}/cancel`)
    expect(cancelled).toMatchObject({ status: 200, body: { id, status: 'cancelled', changed: true } })
    expect(await call('POST', `/api/v1/rollout-groups/${id}/cancel`)).toMatchObject({ status: 200, body: { id, status: 'cancelled', changed: false } })
    expect((await call('POST', `/api/v1/rollout-groups/${id}/start`)).status).toBe(409)
    expect((await call('POST', '/api/v1/rollout-groups', GROUP)).status).toBe(201)
  })

  it('one rule for repeats under concurrency: 6 starts or cancels at once are one changed: true and five 200 changed: false', async () => {
    const { db, call } = await setup(dialect)
    const sixAtOnce = async (path: string) => {
      const answers = await Promise.all(Array.from({ length: 6 }, () => call('POST', path)))
      expect(answers.map((a) => a.status), path).toEqual([200, 200, 200, 200, 200, 200])
      expect(answers.map((a) => (a.body as { changed: boolean }).changed).sort(), path).toEqual([false, false, false, false, false, true])
      return answers.map((a) => a.body as { status: string; version: number })
    }
    const workflows = async (key: string) => Number(((await db('workflow_runs').where({ workflow_key: key }).count({ n: '*' }).first()) as { n: unknown }).n)

    const rollout = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    for (const body of await sixAtOnce(`/api/v1/rollouts/${rollout.id}/start`)) expect(body).toMatchObject({ status: 'running', version: 2 })
    expect(await workflows(rollout.id)).toBe(1)
    expect(await db('outbox').where({ subject: `events.rollout.${rollout.id}.started` }).select('subject')).toHaveLength(1)
    await db('rollouts').where({ id: rollout.id }).update({ status: 'completed' })

    const pending = (await call('POST', '/api/v1/rollouts', AUTO)).body as RolloutView
    for (const body of await sixAtOnce(`/api/v1/rollouts/${pending.id}/cancel`)) expect(body).toMatchObject({ status: 'cancelled', version: 2 })
    expect(await db('outbox').where({ subject: `events.rollout.${pending.id}.completed` }).select('subject')).toHaveLength(1)

    const group = (await call('POST', '/api/v1/rollout-groups', GROUP)).body as RolloutGroupView
    for (const body of await sixAtOnce(`/api/v1/rollout-groups/${group.id}/start`)) expect(body).toMatchObject({ status: 'running', version: 2 })
    expect(await workflows(group.id)).toBe(1)
    await db('rollout_groups').where({ id: group.id }).update({ status: 'completed' })

    const pendingGroup = (await call('POST', '/api/v1/rollout-groups', GROUP)).body as RolloutGroupView
    for (const body of await sixAtOnce(`/api/v1/rollout-groups/${pendingGroup.id}/cancel`)) expect(body).toMatchObject({ status: 'cancelled', version: 2 })
    // A move the winner's state forbids stays refused.
    expect(await call('POST', `/api/v1/rollout-groups/${pendingGroup.id}/start`)).toMatchObject({ status: 409 })
  })

  it('documents every rollout route in the OpenAPI document, admin-scoped', async () => {
    const { api } = await setup(dialect)
    const doc = (await getJson(`${api.url}/api/v1/openapi.json`)).body as { paths: Record<string, Record<string, { security?: unknown }>> }
    const paths = Object.keys(doc.paths).filter((p) => p.startsWith('/api/v1/rollout'))
    expect(paths.sort()).toEqual(
      [
        '/api/v1/rollouts',
        '/api/v1/rollouts/{id}',
        '/api/v1/rollouts/{id}/nodes',
        '/api/v1/rollouts/{id}/start',
        '/api/v1/rollouts/{id}/pause',
        '/api/v1/rollouts/{id}/resume',
        '/api/v1/rollouts/{id}/cancel',
        '/api/v1/rollouts/{id}/rollback',
        '/api/v1/rollouts/{id}/force',
        '/api/v1/rollouts/{id}/approve-canary',
        '/api/v1/rollouts/{id}/nodes/{nodeId}/retry',
        '/api/v1/rollout-groups',
        '/api/v1/rollout-groups/{id}',
        '/api/v1/rollout-groups/{id}/status',
        '/api/v1/rollout-groups/{id}/start',
        '/api/v1/rollout-groups/{id}/pause',
        '/api/v1/rollout-groups/{id}/resume',
        '/api/v1/rollout-groups/{id}/cancel',
        '/api/v1/rollout-groups/{id}/skip',
      ].sort(),
    )
    expect(Object.keys(doc.paths['/api/v1/rollouts'] ?? {}).sort()).toEqual(['get', 'post'])
    expect(doc.paths['/api/v1/rollouts/{id}/force']?.post?.security).toEqual([{ bearerAuth: ['admin'] }])
  })
})

