/**
 * What the split-stack fault tests ask of a running stack (test/helpers/split-stack.ts), shared
 * by the files that run cases on one: requests through the live api-servers, the subscribe-and-pay
 * journey, waits on nodes, and the databases' proof that nothing was lost and nothing done twice
 * (`expectNothingLostNothingTwice`, checked after every case).
 */
import fs from 'node:fs'
import path from 'node:path'
import { expect } from 'vitest'
import { countUnpublished } from '../../src/events/outbox.js'
import { PROVISION_WORKFLOW } from '../../src/provisioning/provision.js'
import { PAYMENT_CONSUMER_DURABLE } from '../../src/subscriptions/activation.js'
import { count, payBody, PAY_ITEM } from './payment-stack.js'
import { waitFor } from './ports.js'
import type { SplitStack, SplitStackUser } from './split-stack.js'

export interface Reply<T = unknown> {
  status: number
  body: T
  via: string
  retryAfter: string | null
}
export interface NodeRow {
  id: string
  subscription_id: string
  state: string
  sync_status: string
  application_health: string
  last_heartbeat: Date | string | null
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
/** No request may hang longer than this, database down or not. */
export const REQUEST_DEADLINE_MS = 15_000

export type SplitStackProbe = ReturnType<typeof splitStackProbe>

/** `label` prefixes the progress lines written to stderr and the payments' idempotency keys. */
export function splitStackProbe(stack: SplitStack, user: SplitStackUser, label: string) {
  /** api-servers currently down (killed by a case): requests go to the others. */
  const down = new Set<string>()
  /** activated_at of every subscription when first seen active: an activation never happens twice. */
  const activatedAt = new Map<string, number>()
  let turn = 0
  let seq = 0

  const mark = (what: string) => process.stderr.write(`[${label}] ${new Date().toISOString()} ${what}\n`)
  const hosts = () => (fs.existsSync(stack.hostsDir) ? fs.readdirSync(stack.hostsDir).sort() : [])

  async function callAt<T = unknown>(base: string, method: string, url: string, body?: unknown, key = user.key): Promise<Reply<T>> {
    const res = await fetch(`${base}${url}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
    })
    const text = await res.text()
    let parsed: unknown = text
    try {
      parsed = text ? JSON.parse(text) : undefined
    } catch {
      // not JSON: kept as text
    }
    return { status: res.status, body: parsed as T, via: base, retryAfter: res.headers.get('retry-after') }
  }
  /** One request, to the live api-servers in turn. */
  function call<T = unknown>(method: string, url: string, body?: unknown, key = user.key): Promise<Reply<T>> {
    const live = stack.apiUrls.filter((u) => !down.has(u))
    return callAt<T>(live[turn++ % live.length] as string, method, url, body, key)
  }
  async function ok<T>(method: string, url: string, body?: unknown, status = 200, key = user.key): Promise<T> {
    const reply = await call<T>(method, url, body, key)
    expect(reply.status, `${method} ${url} via ${reply.via}: ${JSON.stringify(reply.body)}`).toBe(status)
    return reply.body
  }

  async function subscribeAndPay(): Promise<{ subscriptionId: string; paymentId: string }> {
    const sub = await ok<{ id: string; status: string }>('POST', '/api/v1/subscriptions', { ...PAY_ITEM }, 201)
    const payment = await ok<{ id: string; status: string }>('POST', '/api/v1/payments', payBody([sub.id], `${label}-${++seq}`), 201)
    expect(payment.status).toBe('pending')
    return { subscriptionId: sub.id, paymentId: payment.id }
  }
  async function paymentStatus(paymentId: string): Promise<string | undefined> {
    return ((await stack.paymentsDb('payments').where({ id: paymentId }).first('status')) as { status: string } | undefined)?.status
  }
  async function subscriptionRow(id: string): Promise<{ status: string; payment_id: string | null; activated_at: Date | string | null }> {
    return (await stack.db('subscriptions').where({ id }).first('status', 'payment_id', 'activated_at')) as { status: string; payment_id: string | null; activated_at: Date | string | null }
  }
  async function waitActive(subscriptionId: string, paymentId: string, timeoutMs = 60_000): Promise<void> {
    await waitFor(async () => (await subscriptionRow(subscriptionId)).status === 'active', `subscription ${subscriptionId} to become active`, timeoutMs, 250)
    const row = await subscriptionRow(subscriptionId)
    expect(row.payment_id).toBe(paymentId)
    activatedAt.set(subscriptionId, new Date(row.activated_at as string).getTime())
  }
  async function nodeOf(subscriptionId: string, timeoutMs = 30_000): Promise<string> {
    const rows = await waitFor(
      async () => {
        const list = (await stack.db('nodes').where({ subscription_id: subscriptionId }).select('id')) as Array<{ id: string }>
        return list.length > 0 ? list : undefined
      },
      `the node of ${subscriptionId}`,
      timeoutMs,
      200,
    )
    expect(rows).toHaveLength(1)
    return (rows[0] as { id: string }).id
  }
  async function nodeRow(id: string): Promise<NodeRow> {
    return (await stack.db('nodes').where({ id }).first('id', 'subscription_id', 'state', 'sync_status', 'application_health', 'last_heartbeat')) as NodeRow
  }
  async function waitHealthy(id: string, what: string, timeoutMs = 150_000): Promise<NodeRow> {
    return waitFor(
      async () => {
        const n = await nodeRow(id)
        if (n.state === 'failed' || n.state === 'terminated') throw new Error(`node ${id} is ${n.state}`)
        return n.state === 'healthy' && n.sync_status === 'synced' && n.application_health === 'ok' ? n : undefined
      },
      what,
      timeoutMs,
      250,
    )
  }
  const heartbeatMs = (n: NodeRow) => (n.last_heartbeat ? new Date(n.last_heartbeat).getTime() : 0)
  async function nextHeartbeat(id: string, after: number, what: string, timeoutMs = 30_000): Promise<NodeRow> {
    return waitFor(async () => {
      const n = await nodeRow(id)
      return heartbeatMs(n) > after ? n : undefined
    }, what, timeoutMs, 250)
  }
  /** The host dir of a node (local-<id> or, after migrations, local-<id>-mN). */
  function hostOf(nodeId: string): string {
    const mine = hosts().filter((h) => h.startsWith(`local-${nodeId}`))
    expect(mine, `hosts of ${nodeId}: ${hosts().join(', ')}`).toHaveLength(1)
    return path.join(stack.hostsDir, mine[0] as string)
  }
  /** The gateway (instance name) the node's agent last connected to, from the agent's log. */
  function gatewayOfAgent(nodeId: string): string | undefined {
    const log = path.join(hostOf(nodeId), 'agent.log')
    const lines = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter((l) => l.includes('"msg":"connected to the agent-gateway"')) : []
    const last = lines.at(-1)
    if (!last) return undefined
    const target = (JSON.parse(last) as { target?: string }).target
    const index = stack.gatewayTargets.indexOf(target as string)
    return index >= 0 ? stack.namesOf('agent-gateway')[index] : undefined
  }
  /** Nothing lost, nothing done twice: checked from the databases after every case. */
  async function expectNothingLostNothingTwice(what: string): Promise<void> {
    const db = stack.db
    const subs = (await db('subscriptions').select('id', 'status', 'payment_id', 'activated_at')) as Array<{ id: string; status: string; payment_id: string | null; activated_at: Date | string | null }>
    const nodes = (await db('nodes').select('id', 'subscription_id', 'state')) as Array<{ id: string; subscription_id: string; state: string }>
    // Exactly one node per paid subscription, none for an unpaid one.
    for (const sub of subs) {
      const mine = nodes.filter((n) => n.subscription_id === sub.id)
      expect(mine, `${what}: nodes of subscription ${sub.id} (${sub.status})`).toHaveLength(sub.status === 'pending_payment' ? 0 : 1)
    }
    // One provision run per node.
    const runs = (await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW }).pluck('workflow_key')) as string[]
    expect(runs.sort(), `${what}: provision runs`).toEqual(nodes.map((n) => n.id).sort())
    // One host per live node.
    const owners = hosts().map((h) => /^local-([0-9a-f-]{36})(?:-m\d+)?$/.exec(h)?.[1] ?? h)
    expect(owners.sort(), `${what}: hosts ${hosts().join(', ')}`).toEqual(nodes.filter((n) => n.state !== 'terminated').map((n) => n.id).sort())
    // No duplicate incident: never two open at once for one (node, category).
    const incidents = (await db('incidents').orderBy('first_seen_at').select('id', 'node_id', 'category', 'status', 'first_seen_at', 'resolved_at')) as Array<{
      id: string
      node_id: string
      category: string
      status: string
      first_seen_at: Date | string
      resolved_at: Date | string | null
    }>
    const lastOpenUntil = new Map<string, number>()
    for (const incident of incidents) {
      const pair = `${incident.node_id}/${incident.category}`
      const from = new Date(incident.first_seen_at).getTime()
      expect(from, `${what}: incident ${incident.id} (${pair}) overlaps an earlier one: ${JSON.stringify(incidents)}`).toBeGreaterThanOrEqual(lastOpenUntil.get(pair) ?? 0)
      lastOpenUntil.set(pair, incident.resolved_at ? new Date(incident.resolved_at).getTime() : Number.POSITIVE_INFINITY)
    }
    // Every payment activated once: one subscription each, its activation time unchanged, one
    // consumer record per published payment event, the mirror agreeing with the payments database.
    const payments = (await stack.paymentsDb('payments').select('id', 'status')) as Array<{ id: string; status: string }>
    for (const payment of payments) {
      const paid = subs.filter((s) => s.payment_id === payment.id)
      expect(paid.map((s) => s.status), `${what}: subscriptions of payment ${payment.id} (${payment.status})`).toEqual(payment.status === 'completed' ? ['active'] : paid.map(() => 'pending_payment'))
      const mirror = (await db('payment_requests').where({ id: payment.id }).first('status')) as { status: string } | undefined
      expect(mirror?.status, `${what}: mirror of payment ${payment.id}`).toBe(payment.status)
    }
    for (const sub of subs) {
      const first = activatedAt.get(sub.id)
      if (first !== undefined) expect(new Date(sub.activated_at as string).getTime(), `${what}: activated_at of ${sub.id}`).toBe(first)
    }
    expect(await countUnpublished(stack.paymentsDb), `${what}: unpublished payment events`).toBe(0)
    const events = Number(((await stack.paymentsDb('outbox').whereLike('subject', 'payment.%').count({ n: '*' }).first()) as { n: number | string }).n)
    expect(await count(db, 'idempotency_keys', { consumer: PAYMENT_CONSUMER_DURABLE }), `${what}: payment events consumed`).toBe(events)
    expect(stack.crashed(), `${what}: daemons that died on their own`).toEqual([])
  }

  return {
    down,
    mark,
    hosts,
    callAt,
    call,
    ok,
    subscribeAndPay,
    paymentStatus,
    subscriptionRow,
    waitActive,
    nodeOf,
    nodeRow,
    waitHealthy,
    heartbeatMs,
    nextHeartbeat,
    hostOf,
    gatewayOfAgent,
    expectNothingLostNothingTwice,
  }
}
