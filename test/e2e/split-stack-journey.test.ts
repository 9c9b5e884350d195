/**
 * The production shape (issue 9): every daemon a separate `nodeplane daemon …` process, two
 * api-servers, two orchestrators, two health-evaluators, two agent-gateways, one auth-server and
 * one payment-service, on one real Postgres and one real nats-server (test/helpers/split-stack.ts),
 * and the whole user journey through it, the requests alternating between the two api-servers:
 * a user and key; subscribe; pay with the test provider; payment completed -> subscription active
 * -> one node provisioned by one of the orchestrators on a real node agent running devnet-node ->
 * heartbeats -> healthy and synced; its host dies -> down -> one node_down incident, a migration
 * to a new host by itself, the incident auto-resolves; a canary rollout 1.0.0 -> 1.1.0
 * (auto mode, upgrades/devnet/devnet-1.1.0.yaml) completes and the node reports 1.1.0; uptime
 * figures for 24h; expiry and, after the grace period, termination with the host removed.
 * Exactly one node per subscription and no duplicate incident throughout. On the way, operators'
 * commands on this shape (issue 22): `node show --wide` with the chain's pid as reported through a
 * gateway daemon, `node terminate` of an active subscription's node refused, and a scheduled
 * rollout cancelled before its time, freeing the chain for the canary rollout.
 *
 * Operator clock shortcut: a subscription bought for a week expires in a week, and its grace
 * period lasts 24 hours. Instead of moving a clock shared by separate processes, the test writes
 * `expires_at` (then `grace_period_expires_at`) into the past directly in the database, as an
 * operator would to end a subscription early, and waits for the health-evaluators' cleanup
 * scheduler (SUBSCRIPTION_CLEANUP_INTERVAL=1s) to act on it as it would at that time.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest'
import { PROVISION_WORKFLOW } from '../../src/provisioning/provision.js'
import { TERMINATE_WORKFLOW } from '../../src/provisioning/terminate.js'
import { count, payBody, PAY_ITEM } from '../helpers/payment-stack.js'
import { waitFor } from '../helpers/ports.js'
import { startSplitStack, type SplitStack, type SplitStackUser } from '../helpers/split-stack.js'

interface Subscription {
  id: string
  status: string
  payment_id: string | null
  expires_at: string
  grace_period_expires_at: string | null
}
interface NodeView {
  id: string
  subscription_id: string
  state: string
  sync_status: string
  application_health: string
  display_state: string
  binary_version: string | null
  last_heartbeat: string | null
}
interface Incident {
  id: string
  node_id: string
  category: string
  severity: string
  status: string
  resolved_by: string | null
}
interface Rollout {
  id: string
  status: string
  strategy: string
  canary_size: number | null
  total_nodes: number
  succeeded_nodes: number
  failed_nodes: number
  batch_count: number | null
  error_message: string | null
  pause_reason: string | null
}
interface RolloutNode {
  node_id: string
  batch_index: number
  status: string
  error_message: string | null
}
interface Uptime {
  node_id: string
  window: string
  uptime_percentage: number | null
  uptime_seconds: number
  downtime_seconds: number
  unknown_seconds: number
  total_seconds: number
}
interface Reply<T = unknown> {
  status: number
  body: T
  via: string
}

describe('the whole journey on the split stack (separate daemon processes, Postgres, NATS)', () => {
  let stack: SplitStack
  const served = new Map<string, number>()
  let turn = 0

  beforeAll(async () => {
    const t = Date.now()
    // The journey's user is made by the bootstrap commands while the daemons start.
    stack = await startSplitStack({ users: 1, rpcGateway: true })
    process.stderr.write(`[split-stack journey] stack started in ${((Date.now() - t) / 1000).toFixed(1)}s\n`)
  }, 180_000)
  afterAll(async () => {
    const t = Date.now()
    await stack?.stop()
    process.stderr.write(`[split-stack journey] stack stopped in ${((Date.now() - t) / 1000).toFixed(1)}s\n`)
  }, 60_000)

  /** One request, to the api-servers in turn. */
  async function call<T = unknown>(key: string, method: string, url: string, body?: unknown): Promise<Reply<T>> {
    const base = stack.apiUrls[turn++ % stack.apiUrls.length] as string
    const res = await fetch(`${base}${url}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    })
    const text = await res.text()
    served.set(base, (served.get(base) ?? 0) + 1)
    return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T, via: base }
  }
  async function ok<T>(key: string, method: string, url: string, body?: unknown, status = 200): Promise<T> {
    const reply = await call<T>(key, method, url, body)
    expect(reply.status, `${method} ${url} via ${reply.via}: ${JSON.stringify(reply.body)}`).toBe(status)
    return reply.body
  }

  it('subscribe, pay, provision, heartbeats, incident, canary rollout, uptime, expiry, termination', { timeout: 330_000 }, async () => {
    onTestFailed(() => stack.printLogs())
    const started = Date.now()
    const mark = (step: string) => process.stderr.write(`[split-stack journey] ${((Date.now() - started) / 1000).toFixed(1)}s ${step}\n`)

    // A user with a key (users come from the identity provider in production; here the bootstrap
    // commands, `user create` and `api-key issue`, run by startSplitStack).
    const user = stack.users[0] as SplitStackUser
    const me = await ok<{ user_id: string; is_admin: boolean }>(user.key, 'GET', '/api/v1/me')
    expect(me).toMatchObject({ user_id: user.userId, is_admin: false })
    const key = user.key
    const subscription = (id: string) => ok<Subscription>(key, 'GET', `/api/v1/subscriptions/${id}`)
    const nodesOf = async (id: string) => (await ok<{ items: NodeView[] }>(key, 'GET', `/api/v1/nodes?subscription_id=${id}`)).items
    const node = (id: string) => ok<NodeView>(key, 'GET', `/api/v1/nodes/${id}`)
    const incidentsOf = async (id: string) => (await ok<{ items: Incident[] }>(key, 'GET', `/api/v1/incidents?node_id=${id}`)).items
    const hosts = () => (fs.existsSync(stack.hostsDir) ? fs.readdirSync(stack.hostsDir).sort() : [])

    // Subscribe (devnet full, one week) and pay with the test provider.
    const sub = await ok<Subscription>(key, 'POST', '/api/v1/subscriptions', { ...PAY_ITEM }, 201)
    expect(sub).toMatchObject({ status: 'pending_payment', payment_id: null })
    const payment = await ok<{ id: string; status: string }>(key, 'POST', '/api/v1/payments', payBody([sub.id], 'split-journey-1'), 201)
    expect(payment.status).toBe('pending')
    mark('paid')

    // payment.completed (payment-service outbox -> NATS) -> an orchestrator's consumer activates.
    const active = await waitFor(async () => {
      const current = await subscription(sub.id)
      return current.status === 'active' ? current : undefined
    }, 'the subscription to become active', 30_000, 250)
    expect(active.payment_id).toBe(payment.id)
    expect(await ok(key, 'GET', `/api/v1/payments/${payment.id}`)).toMatchObject({ id: payment.id, status: 'completed' })
    mark('active')

    // One node, provisioned by one of the orchestrators on a real agent, heartbeating through a gateway.
    const healthy = (id: string, what: string, version: string) =>
      waitFor(
        async () => {
          const current = await node(id)
          if (current.state === 'failed' || current.state === 'terminated') throw new Error(`node is ${current.state}`)
          return current.state === 'healthy' && current.sync_status === 'synced' && current.application_health === 'ok' && current.binary_version === version ? current : undefined
        },
        what,
        120_000,
        250,
      )
    const [first] = await waitFor(async () => {
      const list = await nodesOf(sub.id)
      return list.length > 0 ? list : undefined
    }, 'the node to exist', 30_000, 250)
    const nodeId = (first as NodeView).id
    const up = await healthy(nodeId, 'the node to be healthy and synced', '1.0.0')
    expect(up).toMatchObject({ display_state: 'healthy', binary_version: '1.0.0' })
    expect(Date.now() - Date.parse(up.last_heartbeat as string)).toBeLessThan(10_000)
    await waitFor(async () => Date.parse((await node(nodeId)).last_heartbeat as string) > Date.parse(up.last_heartbeat as string), 'the next heartbeat', 15_000, 250)
    expect(await nodesOf(sub.id)).toHaveLength(1)
    expect(hosts()).toEqual([`local-${nodeId}`])
    const creators = stack.namesOf('orchestrator').filter((name) => stack.log(name).split('\n').some((l) => l.includes('"msg":"local host created"') && l.includes(nodeId)))
    expect(creators).toHaveLength(1)
    const registeredAt = stack.namesOf('agent-gateway').filter((name) => stack.log(name).includes('"msg":"agent registered"'))
    expect(registeredAt.length).toBeGreaterThanOrEqual(1)
    mark(`healthy (provisioned by ${creators.join()}, agent on ${registeredAt.join()})`)

    // Operators on this shape (issue 22). Item 8: `node show --wide` reads the database and shows
    // the chain's pid as the agent reported it through a gateway daemon: the live devnet-node.
    const wide = await stack.cli(['node', 'show', '--id', nodeId, '--wide', '--json'])
    expect(wide.exitCode, wide.stderr).toBe(0)
    const chainPid = (JSON.parse(wide.stdout) as { agent?: { chain_pid?: number | null } }).agent?.chain_pid
    expect(chainPid).toEqual(expect.any(Number))
    expect(fs.readFileSync(`/proc/${chainPid as number}/cmdline`, 'utf8')).toContain('devnet-node')
    // Item 6: the live node of an active subscription is not terminated silently; nothing changes.
    const terminate = await stack.cli(['node', 'terminate', '--node', nodeId], { NODEPLANE_API_URL: stack.apiUrls[0] as string, NODEPLANE_API_KEY: stack.admin.key })
    expect(terminate.exitCode).toBe(4)
    expect(terminate.stderr).toContain(`Error: node ${nodeId} is the node of subscription ${sub.id}, which is active`)
    expect(await count(stack.db, 'workflow_runs', { workflow_name: TERMINATE_WORKFLOW })).toBe(0)
    expect((await subscription(sub.id)).status).toBe('active')
    mark('operator: chain pid shown, terminate of an active node refused')

    // The customer's endpoint (issue 18) through the rpc-gateway daemon, with the user's key: the
    // devnet chain answers; after the migration below the same URL reaches it on its new host.
    const endpoint = ((await node(nodeId)) as NodeView & { endpoints: { http: string } }).endpoints.http
    expect(endpoint).toBe(`${stack.rpcUrl as string}/v1/${nodeId}`)
    // Not eth_chainId: the gateway answers that from memory once known.
    const clientVersion = async () => {
      const res = await fetch(endpoint, { method: 'POST', headers: { 'X-API-Key': key, 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"web3_clientVersion","params":[]}' })
      return { status: res.status, body: (await res.json()) as unknown }
    }
    expect(await clientVersion()).toEqual({ status: 200, body: { jsonrpc: '2.0', id: 1, result: 'devnet-node/v1.0.0' } })

    // An incident: the host dies (its agent's process group: agent and devnet-node), heartbeats stop.
    const record = JSON.parse(fs.readFileSync(path.join(stack.hostsDir, `local-${nodeId}`, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-record.pid, 'SIGKILL')
    const [raised] = await waitFor(async () => {
      const list = (await incidentsOf(nodeId)).filter((i) => i.category === 'node_down')
      return list.length > 0 ? list : undefined
    }, 'a node_down incident', 60_000, 250)
    expect(raised).toMatchObject({ node_id: nodeId, category: 'node_down', severity: 'critical' })
    mark('node_down incident')
    // Down past MIGRATION_GRACE: migrated to a new host by itself, healthy again, the incident resolves itself.
    await healthy(nodeId, 'the node to be healthy again after its migration', '1.0.0')
    expect(hosts()).toHaveLength(1)
    expect(hosts()[0]).toMatch(new RegExp(`^local-${nodeId}-m\\d+$`))
    // One incident: the new chain not answering while it starts raises none (its agent reports it `starting`).
    let seen: Incident[] = []
    const resolved = await waitFor(async () => {
      const list = (seen = await incidentsOf(nodeId))
      return list.length === 1 && list[0]?.status === 'auto_resolved' ? list : undefined
    }, 'the node_down incident to auto-resolve', 60_000, 250).catch((err: Error) => {
      throw new Error(`${err.message}; incidents ${JSON.stringify(seen.map((i) => ({ category: i.category, status: i.status })))}`)
    })
    expect(resolved[0]).toMatchObject({ id: raised?.id, category: 'node_down', resolved_by: 'auto' })
    expect(await clientVersion()).toEqual({ status: 200, body: { jsonrpc: '2.0', id: 1, result: 'devnet-node/v1.0.0' } })
    mark('migrated, incident auto-resolved, the endpoint answers from the new host')

    // A canary rollout of devnet 1.0.0 -> 1.1.0 from the manifest, by an admin.
    const adminKey = stack.admin.key
    expect((await call(key, 'POST', '/api/v1/rollouts', {})).status).toBe(403)
    // Item 7: a rollout scheduled an hour ahead holds the chain's one active slot until it is
    // cancelled, which ends it at once, through the other api-server, touching no node.
    const scheduled = await ok<Rollout>(adminKey, 'POST', '/api/v1/rollouts', { upgrade_id: 'devnet-1.1.0', chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0', scheduled_at: new Date(Date.now() + 3_600_000).toISOString() }, 201)
    expect(await ok<Rollout>(adminKey, 'POST', `/api/v1/rollouts/${scheduled.id}/start`)).toMatchObject({ status: 'scheduled' })
    expect((await call(adminKey, 'POST', '/api/v1/rollouts', { upgrade_id: 'devnet-1.1.0', chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' })).status).toBe(409)
    expect(await ok<Rollout>(adminKey, 'POST', `/api/v1/rollouts/${scheduled.id}/cancel`)).toMatchObject({ status: 'cancelled', started_at: null })
    const rollout = await ok<Rollout>(
      adminKey,
      'POST',
      '/api/v1/rollouts',
      {
        upgrade_id: 'devnet-1.1.0',
        chain_profile_id: 'devnet',
        node_type: 'full',
        source_version: '1.0.0',
        strategy: 'canary',
        canary_size: 1,
        batch_size: 1,
        health_wait_duration: '3s',
        reason: 'split-stack journey',
      },
      201,
    )
    expect(rollout).toMatchObject({ status: 'pending', strategy: 'canary', canary_size: 1 })
    await ok(adminKey, 'POST', `/api/v1/rollouts/${rollout.id}/start`)
    const done = await waitFor(async () => {
      const current = await ok<Rollout>(adminKey, 'GET', `/api/v1/rollouts/${rollout.id}`)
      if (['failed', 'cancelled', 'rolled_back', 'paused'].includes(current.status)) throw new Error(`rollout ${current.status}: ${current.error_message ?? current.pause_reason}`)
      return current.status === 'completed' ? current : undefined
    }, 'the rollout to complete', 120_000, 500)
    expect(done).toMatchObject({ total_nodes: 1, succeeded_nodes: 1, failed_nodes: 0 })
    const rolloutNodes = (await ok<{ items: RolloutNode[] }>(adminKey, 'GET', `/api/v1/rollouts/${rollout.id}/nodes`)).items
    expect(rolloutNodes.map((n) => [n.node_id, n.batch_index, n.status])).toEqual([[nodeId, 0, 'succeeded']])
    await healthy(nodeId, 'the node to report 1.1.0 and be healthy', '1.1.0')
    mark('rollout completed, node on 1.1.0')

    // Uptime over 24h: up while healthy, down during the outage and the maintenance windows.
    const uptime = await ok<Uptime>(key, 'GET', `/api/v1/nodes/${nodeId}/uptime?window=24h`)
    expect(uptime).toMatchObject({ node_id: nodeId, window: '24h' })
    expect(uptime.total_seconds).toBeGreaterThan(0)
    expect(uptime.uptime_seconds).toBeGreaterThan(0)
    expect(uptime.downtime_seconds).toBeGreaterThan(0)
    expect(uptime.uptime_percentage).toBeGreaterThan(0)
    expect(uptime.uptime_percentage).toBeLessThan(100)
    mark(`uptime ${uptime.uptime_percentage}%`)

    // Expiry (operator clock shortcut, see the top): expires_at in the past -> expiring, grace from now.
    expect(Date.parse(active.expires_at)).toBeGreaterThan(Date.now())
    await stack.db('subscriptions').where({ id: sub.id }).update({ expires_at: new Date(Date.now() - 60_000) })
    const expiring = await waitFor(async () => {
      const current = await subscription(sub.id)
      return current.status === 'expiring' ? current : undefined
    }, 'the cleanup scheduler to move the subscription to expiring', 30_000, 250)
    expect(Date.parse(expiring.grace_period_expires_at as string)).toBeGreaterThan(Date.now() + 23 * 3_600_000)
    expect((await node(nodeId)).state).not.toBe('terminated')
    expect(hosts()).toHaveLength(1)
    mark('expiring')

    // Past the grace period -> terminated; the terminate workflow stops the node and removes its host.
    await stack.db('subscriptions').where({ id: sub.id }).update({ grace_period_expires_at: new Date(Date.now() - 60_000) })
    await waitFor(async () => (await subscription(sub.id)).status === 'terminated', 'the subscription to be terminated', 30_000, 250)
    await waitFor(async () => (await node(nodeId)).state === 'terminated', 'the node to be terminated', 60_000, 250)
    await waitFor(async () => hosts().length === 0, 'its host to be removed', 30_000, 250)
    mark('terminated')

    // Exactly one node for the subscription, one provision and one terminate run, one incident.
    expect((await nodesOf(sub.id)).map((n) => [n.id, n.state])).toEqual([[nodeId, 'terminated']])
    expect(await count(stack.db, 'nodes')).toBe(1)
    expect(await count(stack.db, 'workflow_runs', { workflow_name: PROVISION_WORKFLOW })).toBe(1)
    expect(await count(stack.db, 'workflow_runs', { workflow_name: TERMINATE_WORKFLOW })).toBe(1)
    const incidents = await incidentsOf(nodeId)
    expect(incidents.map((i) => [i.id, i.category])).toEqual([[raised?.id, 'node_down']])
    expect(await count(stack.db, 'incidents')).toBe(1)
    // Both api-servers answered; no daemon died on its own.
    expect([...served.keys()].sort()).toEqual([...stack.apiUrls].sort())
    expect(stack.crashed()).toEqual([])

    // An orchestrator killed -9 and restarted finds nothing left to do twice.
    const killed = await stack.kill('orchestrator-1', 'SIGKILL')
    expect(killed?.signal).toBe('SIGKILL')
    await stack.restart('orchestrator-1')
    await new Promise((resolve) => setTimeout(resolve, 2_000))
    expect(await count(stack.db, 'nodes')).toBe(1)
    expect(await count(stack.db, 'workflow_runs', { workflow_name: PROVISION_WORKFLOW })).toBe(1)
    expect(await count(stack.db, 'workflow_runs', { workflow_name: TERMINATE_WORKFLOW })).toBe(1)
    expect(stack.crashed()).toEqual([])
    mark('orchestrator-1 restarted')
  })
})
