/**
 * Paid but never provisioned (issue 15, item 7; docs/node-lifecycle.md) on both databases: the
 * provision-retry job retries a failed provisioning with backoff, then opens one incident and
 * notifies the user; `POST /api/v1/subscriptions/{id}/reprovision` starts over. A node fails
 * here as the provision workflow leaves it (node `failed` through the state machine, its run
 * `failed`); time moves only through the injected clock.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import { afterEach, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { raiseIncident } from '../../../src/health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../../../src/health/incident-rules.js'
import { createLogger } from '../../../src/log.js'
import { applyHealthUpdate } from '../../../src/nodes/health-state-machine.js'
import type { LifecycleDeps } from '../../../src/provisioning/index.js'
import { PROVISION_WORKFLOW } from '../../../src/provisioning/provision.js'
import { provisionNode } from '../../../src/subscriptions/activation.js'
import { runProvisionRetries, type ProvisionRetrySettings } from '../../../src/subscriptions/provision-retry.js'
import { getRun, NonRetryableStepError } from '../../../src/workflows/index.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertSubscription, insertUser } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { newKey, newUser, startAuthApi, TestClock } from '../auth/api-harness.js'
import { Resources } from '../http/harness.js'
import { lifecycleSetting, startLifecycleWorker } from '../provisioning/harness.js'

const logger = createLogger({ level: 'silent' })
const MINUTE = 60_000
const T0 = new Date('2026-05-01T00:00:00.000Z')
const at = (ms: number) => new Date(T0.getTime() + ms)
const SETTINGS: ProvisionRetrySettings = { maxAttempts: 3, backoffMs: 2 * MINUTE, maxBackoffMs: 60 * MINUTE }

/**
 * What one suite starts, closed after each of its tests. Each suite has its own: the suites run at
 * the same time (each one's tests in order), and one's cleanup must not close another's servers.
 */
function suiteResources(): Resources {
  const resources = new Resources()
  afterEach(() => resources.cleanup())
  return resources
}

const SUBSCRIPTION = { id: '', chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'process' }

/** The payment's activation: a node in provisioning and its provision run. */
async function activate(db: Db, subscriptionId: string, now: Date): Promise<string> {
  return (await db.transaction((trx) => provisionNode(trx, { ...SUBSCRIPTION, id: subscriptionId }, now))).node_id
}

/** What a failed provision workflow leaves: the node failed from provisioning, its run failed. */
async function failProvision(db: Db, nodeId: string, now: Date): Promise<void> {
  await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer: 'provisioning', state: 'failed' }, reason: 'provisioning failed: host quota exceeded', now }))
  await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW, workflow_key: nodeId }).update({ status: 'failed', error: 'host quota exceeded', updated_at: now, completed_at: now })
}

async function nodesOf(db: Db, subscriptionId: string): Promise<Array<{ id: string; state: string }>> {
  return (await db('nodes').where({ subscription_id: subscriptionId }).orderBy('created_at').select('id', 'state')) as Array<{ id: string; state: string }>
}

const pass = (db: Db, now: Date) => runProvisionRetries(db, { now, settings: SETTINGS, logger })
const none = { scheduled: 0, started: 0, exhausted: 0 }

describeEachDialectConcurrently('provisioning retries on %s', (dialect) => {
  const resources = suiteResources()
  it('retries a failed provisioning with exponential backoff, then opens one incident and notifies the user once', async () => {
    const { db } = await resources.database(dialect)
    const userId = await insertUser(db, T0)
    const sub = await insertSubscription(db, userId, T0)
    const first = await activate(db, sub, T0)
    await failProvision(db, first, at(1 * MINUTE))

    // Seen at +1m: the first retry waits the backoff (2m).
    expect(await pass(db, at(1 * MINUTE))).toEqual({ ...none, scheduled: 1 })
    expect(await pass(db, at(2 * MINUTE))).toEqual(none)
    expect(await pass(db, at(3 * MINUTE))).toEqual({ ...none, started: 1 })
    // A second pass at the same moment (a replica, a redelivery) starts nothing more.
    expect(await pass(db, at(3 * MINUTE))).toEqual(none)
    const afterFirstRetry = await nodesOf(db, sub)
    expect(afterFirstRetry.map((n) => n.state)).toEqual(['failed', 'provisioning'])
    const second = afterFirstRetry[1]?.id as string
    expect(await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW, workflow_key: second }).first('status')).toEqual({ status: 'pending' })

    // Each later retry waits twice as long: 4m, then 8m.
    await failProvision(db, second, at(5 * MINUTE))
    expect(await pass(db, at(5 * MINUTE))).toEqual({ ...none, scheduled: 1 })
    expect(await pass(db, at(8 * MINUTE))).toEqual(none)
    expect(await pass(db, at(9 * MINUTE))).toEqual({ ...none, started: 1 })
    const third = (await nodesOf(db, sub))[2]?.id as string
    await failProvision(db, third, at(10 * MINUTE))
    expect(await pass(db, at(10 * MINUTE))).toEqual({ ...none, scheduled: 1 })
    expect(await pass(db, at(17 * MINUTE))).toEqual(none)
    expect(await pass(db, at(18 * MINUTE))).toEqual({ ...none, started: 1 })
    const fourth = (await nodesOf(db, sub))[3]?.id as string

    // The consumer has already raised the spec's per-node incident for the last failure.
    await failProvision(db, fourth, at(20 * MINUTE))
    await db.transaction((trx) =>
      raiseIncident(
        trx,
        { nodeId: fourth, subscriptionId: sub, chainProfileId: 'devnet', category: 'provision_failed', occurredAt: at(20 * MINUTE), title: 'devnet node: provisioning failed', description: 'per node', metadata: { trigger: 'health_event' } },
        DEFAULT_INCIDENT_SETTINGS.flapping,
        at(20 * MINUTE),
      ),
    )
    const notificationsBefore = await db('notifications').where({ user_id: userId }).count({ n: '*' })

    // Budget spent: no fifth node, one incident restated for the subscription, one notification.
    expect(await pass(db, at(21 * MINUTE))).toEqual({ ...none, exhausted: 1 })
    expect(await pass(db, at(600 * MINUTE))).toEqual(none)
    expect((await nodesOf(db, sub)).map((n) => n.state)).toEqual(['failed', 'failed', 'failed', 'failed'])
    const incidents = (await db('incidents').where({ subscription_id: sub }).select('id', 'node_id', 'category', 'severity', 'status', 'title', 'description', 'metadata', 'user_id')) as Array<Record<string, unknown>>
    expect(incidents).toHaveLength(1)
    expect(incidents[0]).toMatchObject({ node_id: fourth, category: 'provision_failed', severity: 'critical', status: 'open', user_id: userId })
    expect(incidents[0]?.title).toBe(`devnet subscription ${sub.slice(0, 8)}: paid, but no node after 4 provisioning attempt(s)`)
    expect(incidents[0]?.description).toContain(`nodeplane subscription reprovision --id ${sub}`)
    expect(fromJson<{ last_occurrence: Record<string, unknown> }>(incidents[0]?.metadata).last_occurrence).toMatchObject({ trigger: 'provision_retries_exhausted', subscription_id: sub, attempts: 4 })
    const notices = (await db('notifications').where({ user_id: userId, kind: 'subscription_provision_failed' }).select('title', 'body', 'data')) as Array<Record<string, unknown>>
    expect(notices).toHaveLength(1)
    expect(notices[0]?.body).toContain(`subscription ${sub} is paid, but its node failed to start 4 time(s)`)
    expect(fromJson<Record<string, unknown>>(notices[0]?.data)).toMatchObject({ subscription_id: sub, incident_id: incidents[0]?.id, node_id: fourth })
    expect(Number((await db('notifications').where({ user_id: userId }).count({ n: '*' }))[0]?.n) - Number(notificationsBefore[0]?.n)).toBe(1)
  })

  it('leaves alone what is not a provisioning failure, and picks up a paid active subscription that has no node at all', async () => {
    const { db } = await resources.database(dialect)
    const userId = await insertUser(db, T0)
    const make = async (status: string, nodeState?: string, runStatus?: string) => {
      const sub = await insertSubscription(db, userId, T0)
      await db('subscriptions').where({ id: sub }).update({ status, activated_at: T0 })
      if (nodeState) {
        const node = await activate(db, sub, T0)
        await db('nodes').where({ id: node }).update({ state: nodeState })
        if (runStatus) await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW, workflow_key: node }).update({ status: runStatus })
      }
      return sub
    }
    await make('active', 'failed', 'completed') // provisioned, failed later (a migration): operators
    await make('active', 'terminated', 'completed') // terminated on purpose
    await make('active', 'healthy', 'completed')
    await make('active', 'provisioning') // still provisioning
    await make('expiring', 'failed', 'failed')
    await make('pending_payment')
    // Active but never activated by a payment (a row made by hand): not ours to provision.
    await db('subscriptions').where({ id: await make('active') }).update({ activated_at: null })
    const nodeless = await make('active')
    const failed = await make('active', 'failed', 'failed')
    expect(await pass(db, T0)).toEqual({ ...none, scheduled: 2 })
    expect(((await db('provision_retries').orderBy('subscription_id').pluck('subscription_id')) as string[]).sort()).toEqual([nodeless, failed].sort())
    expect(await pass(db, at(2 * MINUTE))).toEqual({ ...none, started: 2 })
    expect((await nodesOf(db, nodeless)).map((n) => n.state)).toEqual(['provisioning'])
  })
})

describeEachDialectConcurrently('a real provision workflow that fails, then is retried, on %s', (dialect) => {
  const resources = suiteResources()
  it('the failed run leaves the subscription stranded; the retry provisions a new node to syncing', { timeout: 120_000 }, async () => {
    const { db } = await resources.database(dialect)
    const setting = await lifecycleSetting(db)
    resources.add(() => setting.gateway.stop())
    const failOn = new Set<string>()
    const deps: LifecycleDeps = {
      ...setting.deps,
      injectFault: (step, nodeId) => {
        // Failed for good at once: what this job does after a failed run is under test here, the
        // step retries before a run fails in the engine's tests.
        if (step === 'create-infrastructure' && failOn.has(nodeId)) throw new NonRetryableStepError('injected: no capacity')
      },
    }
    const worker = startLifecycleWorker(db, deps)
    resources.add(async () => {
      await worker.stop()
      for (const host of fs.readdirSync(setting.root)) await setting.provider.destroyHost(host)
    })
    const finished = (runId: string) =>
      waitFor(async () => {
        const run = await getRun(db, runId)
        return run && (run.status === 'completed' || run.status === 'failed') ? run : undefined
      }, `run ${runId} to finish`, 90_000, 100)

    const sub = await insertSubscription(db, await insertUser(db))
    const now = new Date()
    const first = await db.transaction((trx) => provisionNode(trx, { ...SUBSCRIPTION, id: sub }, now))
    failOn.add(first.node_id)
    expect((await finished(first.workflow_run_id)).status).toBe('failed')
    expect((await nodesOf(db, sub)).map((n) => n.state)).toEqual(['failed'])

    expect(await pass(db, now)).toEqual({ ...none, scheduled: 1 })
    expect(await pass(db, new Date(now.getTime() + SETTINGS.backoffMs))).toEqual({ ...none, started: 1 })
    const retried = (await nodesOf(db, sub)).find((n) => n.id !== first.node_id) as { id: string }
    const run = await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW, workflow_key: retried.id }).first('id')
    const done = await finished(String(run.id))
    expect(done.status, done.error ?? '').toBe('completed')
    expect((await nodesOf(db, sub)).map((n) => n.state)).toEqual(['failed', 'syncing'])
    // Provisioned: nothing stranded any more.
    expect(await pass(db, new Date(now.getTime() + 60 * MINUTE))).toEqual(none)
  })
})

describeEachDialectConcurrently('POST /api/v1/subscriptions/{id}/reprovision on %s', (dialect) => {
  const resources = suiteResources()
  async function setup() {
    const { db } = await resources.database(dialect)
    const clock = new TestClock(T0.getTime())
    const api = await startAuthApi(resources, db, { clock })
    const owner = await newUser(db)
    const admin = await newUser(db, { admin: true })
    const keys = { owner: (await newKey(db, owner.id, { scopes: ['*'] })).key, admin: (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key }
    return { db, api, clock, owner, admin, keys }
  }

  it('after the retries ran out: a new node and provision run, a fresh budget; a second call is 409', async () => {
    const t = await setup()
    const sub = await insertSubscription(t.db, t.owner.id, T0)
    const first = await activate(t.db, sub, T0)
    await failProvision(t.db, first, T0)
    await t.db('provision_retries').insert({ subscription_id: sub, attempts: 3, exhausted_at: T0, last_node_id: first, created_at: T0, updated_at: T0 })
    expect(await pass(t.db, at(60 * MINUTE))).toEqual(none)

    t.clock.advance(61 * MINUTE)
    const res = await t.api.call('POST', `/api/v1/subscriptions/${sub.toUpperCase()}/reprovision`, { apiKey: t.keys.admin })
    expect(res.status).toBe(202)
    const body = res.body as { subscription_id: string; node_id: string; workflow_run_id: string; previous_node_id: string }
    expect(body).toMatchObject({ subscription_id: sub, previous_node_id: first })
    expect(await t.db('nodes').where({ id: body.node_id }).first('state', 'subscription_id')).toEqual({ state: 'provisioning', subscription_id: sub })
    expect(await t.db('workflow_runs').where({ id: body.workflow_run_id }).first('workflow_name', 'workflow_key')).toEqual({ workflow_name: PROVISION_WORKFLOW, workflow_key: body.node_id })
    expect(await t.db('provision_retries').where({ subscription_id: sub }).first('attempts', 'exhausted_at', 'next_attempt_at', 'reset_by')).toEqual({
      attempts: 0,
      exhausted_at: null,
      next_attempt_at: null,
      reset_by: `user:${t.admin.id}`,
    })

    const again = await t.api.call('POST', `/api/v1/subscriptions/${sub}/reprovision`, { apiKey: t.keys.admin })
    expect(again).toMatchObject({ status: 409, body: { error: `subscription ${sub} already has a live node ${body.node_id} (provisioning)`, details: expect.any(String) } })

    // The reset budget is the job's again once the new node fails.
    await failProvision(t.db, body.node_id, at(62 * MINUTE))
    expect(await pass(t.db, at(62 * MINUTE))).toEqual({ ...none, scheduled: 1 })
  })

  it('a double click starts one provision: one 202, one 409, one live node', async () => {
    const t = await setup()
    const sub = await insertSubscription(t.db, t.owner.id, T0)
    await failProvision(t.db, await activate(t.db, sub, T0), T0)
    const answers = await Promise.all([1, 2, 3].map(() => t.api.call('POST', `/api/v1/subscriptions/${sub}/reprovision`, { apiKey: t.keys.admin })))
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409, 409])
    for (const a of answers.filter((x) => x.status === 409)) expect(a.body).toMatchObject({ error: expect.stringMatching(/already has a live node/), details: expect.any(String) })
    expect((await nodesOf(t.db, sub)).map((n) => n.state)).toEqual(['failed', 'provisioning'])
  })

  it('refuses with the spec statuses and writes nothing', async () => {
    const t = await setup()
    const healthy = await insertSubscription(t.db, t.owner.id, T0)
    const liveNode = await activate(t.db, healthy, T0)
    const pending = await insertSubscription(t.db, t.owner.id, T0)
    await t.db('subscriptions').where({ id: pending }).update({ status: 'pending_payment' })
    const terminated = await insertSubscription(t.db, t.owner.id, T0)
    await t.db('subscriptions').where({ id: terminated }).update({ status: 'terminated' })
    const failed = await insertSubscription(t.db, t.owner.id, T0)
    await failProvision(t.db, await activate(t.db, failed, T0), T0)
    const cases: Array<[string, string | undefined, number, RegExp]> = [
      [crypto.randomUUID(), t.keys.admin, 404, /^not found: no subscription with this id$/],
      ['not-a-uuid', t.keys.admin, 404, /^not found: no subscription with this id$/],
      [healthy, t.keys.admin, 409, new RegExp(`already has a live node ${liveNode} \\(provisioning\\)`)],
      [pending, t.keys.admin, 409, /is pending_payment: only an active subscription/],
      [terminated, t.keys.admin, 409, /is terminated: only an active subscription/],
      [failed, t.keys.owner, 403, /admin/],
      [failed, undefined, 401, /./],
    ]
    for (const [id, key, status, text] of cases) {
      const res = await t.api.call('POST', `/api/v1/subscriptions/${id}/reprovision`, key ? { apiKey: key } : {})
      expect(res.status, `${id} ${status}`).toBe(status)
      const err = res.body as { error: string; details: string }
      expect(`${err.error}: ${err.details}`).toMatch(text)
    }
    expect(Number((await t.db('nodes').count({ n: '*' }))[0]?.n)).toBe(2)
    expect(Number((await t.db('provision_retries').count({ n: '*' }))[0]?.n)).toBe(0)
  })
})
