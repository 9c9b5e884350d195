/**
 * The one rule for repeats (docs/cli.md, "Repeats") on `payment cancel`, through the built binary
 * against the in-process purchase stack (test/helpers/payment-stack.ts: the payment service over
 * mutual-TLS gRPC, the api-server routes) on both databases: a payment canceled already is a
 * repeat, exit 0, said in one line, nothing asked nor changed; a completed one still exits 4.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLocalBus, type LocalBus } from '../../src/events/local-bus.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { DIALECTS } from '../helpers/db.js'
import { payBody, PAY_ITEM, startPaymentStack, type PaymentStack } from '../helpers/payment-stack.js'
import { waitFor } from '../helpers/ports.js'

interface Payment {
  id: string
  status: string
  updated_at: string
  changed?: boolean
}
const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T

describe.each(DIALECTS)('payment cancel, repeated, through the binary on %s', (dialect) => {
  let stack: PaymentStack | undefined
  let bus: LocalBus | undefined
  const dir = tempDir()

  beforeAll(async () => {
    bus = createLocalBus()
    // Payments settle 3 s after creation: the first cancel lands before, also on a loaded machine.
    stack = await startPaymentStack({ dialect, paymentBus: bus, controlBus: bus, providerDelayMs: 3_000 })
  }, 60_000)
  afterAll(async () => {
    await stack?.stop()
    await bus?.close()
  })

  it('a canceled payment canceled again: exit 0, one line saying nothing changed, without --yes; --json changed false; a completed one exits 4', { timeout: 60_000 }, async () => {
    const s = stack as PaymentStack
    const call = (method: string, path: string, body?: unknown) => s.api.call(method, path, { bearer: s.key, ...(body === undefined ? {} : { body }) })
    const pay = async (key: string): Promise<Payment> => {
      const sub = (await call('POST', '/api/v1/subscriptions', { ...PAY_ITEM })).body as { id: string }
      const created = await call('POST', '/api/v1/payments', payBody([sub.id], key))
      expect(created.status).toBe(201)
      return created.body as Payment
    }
    // Canceled at once through the API, before the test provider would complete it.
    const canceledOne = await pay('cancel-me')
    const first = await call('POST', `/api/v1/payments/${canceledOne.id}/cancel`)
    expect(first).toMatchObject({ status: 200, body: { status: 'canceled', changed: true } })
    const completedOne = await pay('let-me-complete')
    await waitFor(async () => ((await call('GET', `/api/v1/payments/${completedOne.id}`)).body as Payment).status === 'completed' || undefined, 'the second payment to complete', 30_000, 50)
    const stored = await s.paymentsDb('payments').where({ id: canceledOne.id }).first('status', 'updated_at')

    const env = { NODEPLANE_API_URL: s.api.url, NODEPLANE_API_KEY: s.key, HOME: dir }
    const [again, againJson, completed] = await Promise.all([
      // No --yes and no terminal: a repeat is not asked about, so nothing refuses it.
      nodeplane(['payment', 'cancel', canceledOne.id], { cwd: dir, env }),
      nodeplane(['payment', 'cancel', canceledOne.id, '--json'], { cwd: dir, env }),
      nodeplane(['payment', 'cancel', completedOne.id, '--yes'], { cwd: dir, env }),
    ])
    expect(again.exitCode, again.stderr).toBe(0)
    expect(again.stdout).toMatch(new RegExp(`^Payment ${canceledOne.id} was already canceled (just now|\\d+s ago); nothing changed\\.$`))
    expect(againJson.exitCode, againJson.stderr).toBe(0)
    expect(json<Payment>(againJson)).toMatchObject({ id: canceledOne.id, status: 'canceled', changed: false })
    expect(completed.exitCode).toBe(4)
    expect(completed.stderr.split('\n')[0]).toBe(`Error: payment ${completedOne.id} is completed; only a pending payment can be canceled`)
    expect(await s.paymentsDb('payments').where({ id: canceledOne.id }).first('status', 'updated_at')).toEqual(stored)
  })
})
