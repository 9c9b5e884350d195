import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { waitFor } from '../helpers/ports.js'

interface Payment {
  id: string
  user_id: string
  status: string
  method: string
  provider: string
  amount_minor: number
  currency: string
  items: Array<{ chain_profile_id: string; node_type: string; duration: string; unit_price_minor: number }>
  subscription_ids: string[]
  checkout_url: string | null
  crypto: { currency: string; amount: string; amount_base_units: string; receiver_address: string; memo: string } | null
  failure_reason: string | null
  idempotency_key: string
  expires_at: string
  created_at: string
  completed_at: string | null
  [key: string]: unknown
}

interface ErrorOutput {
  error: { name: string; message: string; exit_code: number }
}

/**
 * A completed payment activates its subscription, which provisions a node on the local provider:
 * a detached node agent (own process group) that outlives `up` by design (docs/infrastructure.md).
 * Stop the agents this test's stack started, by the pids their hosts recorded.
 */
async function stopLocalHosts(dataDir: string): Promise<void> {
  const hosts = path.join(dataDir, 'hosts')
  if (!fs.existsSync(hosts)) return
  const pids = new Set<number>()
  for (const host of fs.readdirSync(hosts)) {
    const record = path.join(hosts, host, 'host.json')
    if (fs.existsSync(record)) pids.add(Number((JSON.parse(fs.readFileSync(record, 'utf8')) as { pid: number }).pid))
    const own = path.join(hosts, host, 'state', 'agent.pid')
    if (fs.existsSync(own)) pids.add(Number(fs.readFileSync(own, 'utf8').trim()))
  }
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0)
      return true
    } catch {
      return false
    }
  }
  const signal = (pid: number, sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig)
    } catch {
      // already gone
    }
  }
  const running = [...pids].filter((pid) => Number.isInteger(pid) && pid > 1 && alive(pid))
  for (const pid of running) signal(pid, 'SIGTERM')
  const deadline = Date.now() + 10_000
  while (running.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  for (const pid of running.filter(alive)) signal(pid, 'SIGKILL')
}

/** `payment methods|create|list|show|cancel` and `quote` over the API against one `nodeplane up` (test provider, 200 ms). */
describe('payment commands (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let aliceEnv: Record<string, string>
  let aliceId: string

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T
  const subscribe = async (env: Record<string, string> = {}, duration = '1w'): Promise<string> => {
    const created = await run(['subscription', 'create', '--chain', 'devnet', '--node-type', 'full', '--duration', duration, '--json'], env)
    expect(created.exitCode, created.stderr).toBe(0)
    return json<{ id: string }>(created).id
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), PAYMENT_TEST_PROVIDER_DELAY: '200ms' } })
    await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const user = await run(['user', 'create', '--email', 'payer@example.test', '--json'])
    expect(user.exitCode, user.stderr).toBe(0)
    aliceId = json<{ id: string }>(user).id
    const scopes = 'subscriptions:read,subscriptions:write,payments:read,payments:write'
    const issued = await run(['api-key', 'issue', '--user', aliceId, '--name', 'payer', '--scopes', scopes, '--json'])
    expect(issued.exitCode, issued.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }
  })

  afterAll(async () => {
    up?.kill('SIGTERM')
    const stopped = up ? await up : undefined
    if (dir) await stopLocalHosts(path.join(dir, '.nodeplane'))
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
    if (stopped) expect(stopped.exitCode).toBe(143)
  })

  it('methods, a quote, then card payment with --wait completes; list and show have it; the subscription is activated', { timeout: 120_000 }, async () => {
    const methods = await run(['payment', 'methods', '--json'], aliceEnv)
    expect(methods.exitCode, methods.stderr).toBe(0)
    expect(json<{ methods: string[] }>(methods).methods).toEqual(expect.arrayContaining(['card', 'crypto']))
    const methodsText = await run(['payment', 'methods'], aliceEnv)
    expect(methodsText.stdout.trim().split('\n')).toEqual(expect.arrayContaining(['card', 'crypto']))

    const quoteText = await run(['quote', '--item', 'devnet/full/1w'], aliceEnv)
    expect(quoteText.exitCode, quoteText.stderr).toBe(0)
    expect(quoteText.stdout).toMatch(/^total: 5\.00 USD, .*USDC/m)
    expect(quoteText.stdout).toMatch(/^quote [0-9a-f-]{36}, valid until /m)
    const quote = json<{ id: string; amount_minor: number; currency: string; items: unknown[]; crypto_amounts: Record<string, string>; expires_at: string }>(
      await run(['quote', '--item', 'devnet/full/1w', '--json'], aliceEnv),
    )
    expect(quote).toMatchObject({ amount_minor: 500, currency: 'USD', items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w', unit_price_minor: 500 }] })
    expect(quote.id).toMatch(/^[0-9a-f-]{36}$/)
    expect(Object.keys(quote.crypto_amounts).sort()).toEqual(['ETH', 'USDC', 'USDT'])
    const validMs = Date.parse(quote.expires_at) - Date.now()
    expect(validMs).toBeGreaterThan(14 * 60_000)
    expect(validMs).toBeLessThanOrEqual(15 * 60_000)
    const unknownItem = await run(['quote', '--item', 'devnet/validator/1w'], aliceEnv)
    expect(unknownItem.exitCode).toBe(2)

    const subscriptionId = await subscribe(aliceEnv)
    const paid = await run(['payment', 'create', '--subscription', subscriptionId, '--method', 'card', '--quote-id', quote.id, '--wait', '--json'], aliceEnv)
    expect(paid.exitCode, paid.stderr).toBe(0)
    const payment = json<Payment & { created: boolean }>(paid)
    expect(payment).toMatchObject({
      user_id: aliceId,
      status: 'completed',
      method: 'card',
      provider: 'test',
      amount_minor: 500,
      currency: 'USD',
      items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w', unit_price_minor: 500 }],
      subscription_ids: [subscriptionId],
      crypto: null,
      failure_reason: null,
      created: true,
    })
    expect(payment.id).toMatch(/^[0-9a-f-]{36}$/)
    expect(payment.idempotency_key.length).toBeGreaterThan(0)
    expect(Date.parse(payment.completed_at ?? '')).not.toBeNaN()

    const listed = await run(['payment', 'list', '--json'], aliceEnv)
    expect(listed.exitCode, listed.stderr).toBe(0)
    const payments = json<{ payments: Array<Record<string, unknown>> }>(listed).payments
    expect(payments).toHaveLength(1)
    expect(payments[0]).toMatchObject({ id: payment.id, user_id: aliceId, status: 'completed', method: 'card', crypto_currency: null, amount_minor: 500, currency: 'USD', subscription_ids: [subscriptionId] })
    expect(json<{ payments: unknown[] }>(await run(['payment', 'list', '--status', 'pending', '--json'], aliceEnv)).payments).toEqual([])
    const table = await run(['payment', 'list'], aliceEnv)
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^ID\s+STATUS\s+METHOD\s+AMOUNT\s+SUBSCRIPTIONS\s+CREATED$/)
    expect(lines[2]).toMatch(new RegExp(`^${payment.id}\\s+completed\\s+card\\s+5\\.00 USD\\s+1\\s+`))

    const shown = await run(['payment', 'show', '--id', payment.id, '--json'], aliceEnv)
    expect(shown.exitCode, shown.stderr).toBe(0)
    const { created: _created, updated_at: _u1, ...rest } = payment
    const { updated_at: _u2, ...shownRest } = json<Payment>(shown)
    expect(shownRest).toEqual(rest)
    const human = await run(['payment', 'show', '--id', payment.id], aliceEnv)
    expect(human.stdout).toContain(`payment ${payment.id}`)
    expect(human.stdout).toMatch(/status:\s+completed/)
    expect(human.stdout).toMatch(/amount:\s+5\.00 USD/)

    // payment.completed activated the subscription.
    const active = await waitFor(async () => {
      const sub = json<{ status: string; payment_id: string | null }>(await run(['subscription', 'show', '--id', subscriptionId, '--json'], aliceEnv))
      return sub.status === 'active' ? sub : undefined
    }, 'the subscription to be activated', 30_000, 500)
    expect(active.payment_id).toBe(payment.id)

    // Nothing more to pay, nothing to cancel: exit 4.
    const again = await run(['payment', 'create', '--subscription', subscriptionId, '--method', 'card'], aliceEnv)
    expect(again.exitCode).toBe(4)
    expect(again.stderr).toContain(`subscription ${subscriptionId} is active`)
    const cancel = await run(['payment', 'cancel', '--id', payment.id, '--yes'], aliceEnv)
    expect(cancel.exitCode).toBe(4)
    expect(cancel.stderr.split('\n')[0]).toBe(`Error: payment ${payment.id} is completed; only a pending payment can be canceled`)
    const cancelJson = await run(['payment', 'cancel', '--id', payment.id, '--yes', '--json'], aliceEnv)
    expect(json<ErrorOutput>(cancelJson).error).toMatchObject({ name: 'ConflictError', exit_code: 4 })
  })

  it('another user\'s or an unknown subscription exits 3; another user\'s payment is not listed or shown', { timeout: 90_000 }, async () => {
    // The stack's admin key (no NODEPLANE_API_KEY) subscribes and pays as the admin user.
    const adminSubscription = await subscribe({}, '1m')
    for (const id of [adminSubscription, '00000000-0000-4000-8000-000000000000']) {
      const result = await run(['payment', 'create', '--subscription', id, '--method', 'card'], aliceEnv)
      expect(result.exitCode, id).toBe(3)
      expect(result.stderr.split('\n')[0]).toMatch(/^Error: .*no subscription/)
    }
    const asJson = await run(['payment', 'create', '--subscription', adminSubscription, '--method', 'card', '--json'], aliceEnv)
    expect(json<ErrorOutput>(asJson).error).toMatchObject({ name: 'NotFoundError', exit_code: 3 })

    const adminPaid = await run(['payment', 'create', '--subscription', adminSubscription, '--method', 'crypto', '--crypto-currency', 'USDC', '--wait', '--json'])
    expect(adminPaid.exitCode, adminPaid.stderr).toBe(0)
    const adminPayment = json<Payment>(adminPaid)
    expect(adminPayment).toMatchObject({ status: 'completed', method: 'crypto', amount_minor: 1500, crypto: { currency: 'USDC', amount: '15.000000' } })

    const aliceSees = json<{ payments: Payment[] }>(await run(['payment', 'list', '--json'], aliceEnv)).payments.map((p) => p.id)
    expect(aliceSees).not.toContain(adminPayment.id)
    const adminSees = json<{ payments: Payment[] }>(await run(['payment', 'list', '--json'])).payments.map((p) => p.id)
    expect(adminSees).toContain(adminPayment.id)
    const hidden = await run(['payment', 'show', '--id', adminPayment.id], aliceEnv)
    expect(hidden.exitCode).toBe(3)
    expect(hidden.stderr.split('\n')[0]).toBe(`Error: no payment ${adminPayment.id} among the payments you can see`)
  })

  it('invalid input exits 2 before anything is created', { timeout: 60_000 }, async () => {
    const subscriptionId = await subscribe(aliceEnv, '3m')
    const noCurrency = await run(['payment', 'create', '--subscription', subscriptionId, '--method', 'crypto'], aliceEnv)
    expect(noCurrency.exitCode).toBe(2)
    expect(noCurrency.stderr.split('\n')[0]).toContain('--crypto-currency')
    const cardWithCurrency = await run(['payment', 'create', '--subscription', subscriptionId, '--method', 'card', '--crypto-currency', 'ETH'], aliceEnv)
    expect(cardWithCurrency.exitCode).toBe(2)
    const badMethod = await run(['payment', 'create', '--subscription', subscriptionId, '--method', 'cheque'], aliceEnv)
    expect(badMethod.exitCode).toBe(2)
    const nothing = await run(['payment', 'create', '--method', 'card'], aliceEnv)
    expect(nothing.exitCode).toBe(2)
    const badItem = await run(['payment', 'create', '--item', 'devnet-full-1w', '--method', 'card'], aliceEnv)
    expect(badItem.exitCode).toBe(2)

    const sub = json<{ status: string; payment_id: string | null }>(await run(['subscription', 'show', '--id', subscriptionId, '--json'], aliceEnv))
    expect(sub).toMatchObject({ status: 'pending_payment', payment_id: null })
    expect(json<{ payments: Payment[] }>(await run(['payment', 'list', '--json'], aliceEnv)).payments.every((p) => !p.subscription_ids.includes(subscriptionId))).toBe(true)
  })
})
