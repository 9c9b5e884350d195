/**
 * The crypto provider against a real chain (in-process ganache, contracts/ compiled by solc)
 * and a real database, through PaymentService: pay on chain, watch, complete. The watcher is
 * driven by calling poll() after mining blocks, so nothing waits on wall time except the one
 * case that exercises start()'s own loop.
 */
import crypto from 'node:crypto'
import type { Contract } from 'ethers'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { ConfigError, UnavailableError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { CryptoWatcher, type CryptoWatcherOptions } from '../../../src/payments/crypto-watcher.js'
import { parsePricingConfig } from '../../../src/payments/pricing.js'
import { CryptoProvider, parseTokenContracts, type CryptoProviderOptions } from '../../../src/payments/providers/crypto.js'
import { ProviderRegistry } from '../../../src/payments/providers/registry.js'
import { memoForPayment, PaymentService } from '../../../src/payments/service.js'
import type { CryptoCurrency } from '../../../src/payments/states.js'
import { findPayment, paymentEvents, type PaymentRecord } from '../../../src/payments/store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { startEvmChain, type EvmChain } from '../../helpers/evm.js'
import { waitFor } from '../../helpers/ports.js'
import { minedReceipt } from '../../helpers/receipts.js'

const CONFIRMATIONS = 3
const logger = createLogger({ level: 'silent' })
// $25.00: 25 USDC / USDT, 0.01 ETH.
const pricing = parsePricingConfig({
  pricing: { 'eth-mainnet': { full: { '1m': 2500 } } },
  crypto: { supported_currencies: ['USDC', 'USDT', 'ETH'], exchange_rates: { USDC: '1.00', USDT: '1.00', ETH: '2500.00' } },
})
const USDC_OWED = 25_000_000n
const ETH_OWED = 10n ** 16n

let chain: EvmChain

beforeAll(async () => {
  chain = await startEvmChain()
})

afterAll(async () => {
  await chain?.stop()
})

describe('parseTokenContracts', () => {
  it('reads CURRENCY=address pairs and reports every problem by variable name', () => {
    const a = '0x' + '1'.repeat(40)
    const parsed = parseTokenContracts(` usdc=${a} , ETH=0x${'2'.repeat(40)}`)
    expect([...parsed.keys()]).toEqual(['USDC', 'ETH'])
    expect(parsed.get('USDC')?.toLowerCase()).toBe(a)
    const refused = (() => {
      try {
        parseTokenContracts(`USDC=${a},DOGE=${a},USDT=0x12,ETH,USDC=${a}`)
      } catch (err) {
        return err
      }
      return undefined
    })()
    expect(refused).toBeInstanceOf(ConfigError)
    const problems = (refused as ConfigError).problems.join('\n')
    expect(problems).toMatch(/unknown currency "DOGE"/)
    expect(problems).toMatch(/USDT contract "0x12" is not an address/)
    expect(problems).toMatch(/"ETH" is not CURRENCY=0xaddress/)
    expect(problems).toMatch(/USDC is given twice/)
    expect(() => parseTokenContracts('')).toThrow(/CRYPTO_TOKEN_CONTRACTS is empty/)
    expect(() => parseTokenContracts(`USDC=${a},USDT=${a}`)).toThrow(/USDC and USDT share contract/)
  })
})

describe.each(DIALECTS)('crypto provider on %s', (dialect) => {
  let tdb: TestDatabase
  let db: Db
  let provider: CryptoProvider
  let service: PaymentService
  let options: CryptoProviderOptions
  // The service's and the provider's clock; set by the expiry tests, wall time otherwise.
  let fixedNow: Date | undefined
  const now = () => fixedNow ?? new Date()

  beforeAll(async () => {
    tdb = await createTestDatabase(dialect, { database: 'payments' })
    db = tdb.db
    options = {
      db,
      logger,
      now,
      rpcUrl: chain.rpcUrl,
      receiverAddress: chain.receiverAddress,
      contracts: parseTokenContracts(chain.tokenContractsText),
      confirmations: CONFIRMATIONS,
      pollIntervalMs: 50,
      // Start after whatever the other dialect's suite left on the shared chain.
      startBlock: (await chain.blockNumber()) + 1,
    }
    provider = new CryptoProvider(options)
    service = new PaymentService({ db, logger, pricing: () => pricing, providers: new ProviderRegistry([provider]), now })
  })

  afterEach(() => {
    fixedNow = undefined
  })

  afterAll(async () => {
    await provider?.stop()
    await tdb?.destroy()
  })

  async function newPayment(currency: CryptoCurrency): Promise<PaymentRecord> {
    const { payment } = await service.initiatePayment(
      {
        customer: { id: crypto.randomUUID() },
        items: [{ chain_profile_id: 'eth-mainnet', node_type: 'full', duration: '1m' }],
        method: 'crypto',
        crypto_currency: currency,
        idempotency_key: crypto.randomUUID(),
        return_url: 'https://app.example/return',
        cancel_url: 'https://app.example/cancel',
      },
      { actor: 'user:test' },
    )
    return payment
  }

  async function payToken(token: Contract, to: string, amount: bigint, memo: string): Promise<{ txHash: string; blockNumber: number }> {
    const tx = (await token.getFunction('transferWithMemo')(to, amount, memo)) as { hash: string }
    const receipt = await minedReceipt(chain.provider, tx.hash)
    return { txHash: receipt.hash.toLowerCase(), blockNumber: receipt.blockNumber }
  }

  async function payEth(to: string, amount: bigint, memo: string): Promise<{ txHash: string; blockNumber: number }> {
    const tx = (await chain.router.getFunction('payWithMemo')(to, memo, { value: amount })) as { hash: string }
    const receipt = await minedReceipt(chain.provider, tx.hash)
    return { txHash: receipt.hash.toLowerCase(), blockNumber: receipt.blockNumber }
  }

  /** Buries everything mined so far under the confirmation depth, then polls. */
  async function confirmAndPoll(watcher: CryptoWatcher = provider.watcher) {
    await chain.mine(CONFIRMATIONS)
    return watcher.poll()
  }

  async function status(id: string) {
    return (await findPayment(db, id))?.status
  }

  async function outbox(paymentId: string): Promise<string[]> {
    const rows = (await db('outbox').orderBy('id').select('subject', 'payload')) as Array<{ subject: string; payload: unknown }>
    return rows.filter((r) => fromJson<{ payment_id: string }>(r.payload).payment_id === paymentId).map((r) => r.subject)
  }

  async function transfersOf(txHash: string) {
    return (await db('crypto_transfers').where({ tx_hash: txHash }).select('outcome', 'payment_id', 'amount_base_units', 'log_index')) as Array<{ outcome: string; payment_id: string | null; amount_base_units: string }>
  }

  it('hands out receiver, contract, chain id and memo, and completes the payment once the transfer has enough confirmations', async () => {
    const payment = await newPayment('USDC')
    const memo = memoForPayment(payment.id)
    expect(payment.providerReference).toBe(memo)
    expect(payment.crypto).toMatchObject({ currency: 'USDC', amount: '25.000000', amountBaseUnits: '25000000', memo, receiverAddress: chain.receiverAddress, contractAddress: chain.usdc.target, chainId: chain.chainId })

    const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, memo)
    await chain.mine(CONFIRMATIONS - 1)
    const early = await provider.watcher.poll()
    expect(early.toBlock).toBe(paid.blockNumber - 1)
    expect(early.transfers).toEqual([])
    expect(await status(payment.id)).toBe('pending')

    await chain.mine(1)
    const result = await provider.watcher.poll()
    expect(result.transfers.map((t) => [t.txHash, t.outcome, t.paymentId])).toEqual([[paid.txHash, 'matched', payment.id]])
    const done = (await findPayment(db, payment.id)) as PaymentRecord
    expect(done.status).toBe('completed')
    expect(done.crypto).toMatchObject({ txHash: paid.txHash, blockNumber: paid.blockNumber })
    expect(await outbox(payment.id)).toEqual(['payment.completed'])
    expect(await provider.getPaymentStatus(memo)).toBe('completed')
    const completed = (await paymentEvents(db, payment.id)).find((e) => e.eventType === 'payment.completed')
    expect(completed?.actor).toBe('provider:crypto')
    expect(completed?.details).toMatchObject({ tx_hash: paid.txHash, from_address: chain.payerAddress, amount_base_units: '25000000' })
    expect(completed?.details.overpaid_base_units).toBeUndefined()
  })

  it('takes ETH through the EthMemoRouter', async () => {
    const payment = await newPayment('ETH')
    expect(payment.crypto).toMatchObject({ amountBaseUnits: ETH_OWED.toString(), contractAddress: chain.router.target })
    const before = await chain.provider.getBalance(chain.receiverAddress)
    const paid = await payEth(chain.receiverAddress, ETH_OWED, payment.crypto?.memo as string)
    expect(await chain.provider.getBalance(chain.receiverAddress)).toBe(before + ETH_OWED)

    await confirmAndPoll()
    expect(await status(payment.id)).toBe('completed')
    expect((await findPayment(db, payment.id))?.crypto?.txHash).toBe(paid.txHash)
    expect(await transfersOf(paid.txHash)).toMatchObject([{ outcome: 'matched', payment_id: payment.id }])
  })

  it('fails an underpaid payment with the amounts in the reason, and completes an overpaid one noting the surplus', async () => {
    const under = await newPayment('USDT')
    const over = await newPayment('USDC')
    const short = await payToken(chain.usdt, chain.receiverAddress, USDC_OWED - 1n, under.crypto?.memo as string)
    const surplus = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED + 500_000n, over.crypto?.memo as string)
    const result = await confirmAndPoll()
    expect(result.transfers.map((t) => t.outcome)).toEqual(['underpaid', 'matched'])

    const failed = (await findPayment(db, under.id)) as PaymentRecord
    expect(failed.status).toBe('failed')
    expect(failed.failureReason).toBe('underpaid: expected 25.000000 USDT, received 24.999999 USDT')
    expect(failed.crypto?.txHash).toBe(short.txHash)
    expect(await outbox(under.id)).toEqual(['payment.failed'])

    expect(await status(over.id)).toBe('completed')
    const completed = (await paymentEvents(db, over.id)).find((e) => e.eventType === 'payment.completed')
    expect(completed?.details).toMatchObject({ tx_hash: surplus.txHash, overpaid_base_units: '500000' })
  })

  it('records transfers with an unknown memo, to another receiver or in the wrong token, and changes no payment', async () => {
    const payment = await newPayment('USDC')
    const memo = payment.crypto?.memo as string
    const outboxBefore = Number(((await db('outbox').count({ n: '*' }).first()) as { n: number | string }).n)
    const unknown = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, memoForPayment(crypto.randomUUID()))
    const elsewhere = await payToken(chain.usdc, chain.otherAddress, USDC_OWED, memo)
    const wrongToken = await payToken(chain.usdt, chain.receiverAddress, USDC_OWED, memo)
    // Neither our memo nor our receiver: someone else's business, not recorded.
    const foreign = await payToken(chain.usdc, chain.otherAddress, 1n, memoForPayment(crypto.randomUUID()))

    const result = await confirmAndPoll()
    expect(result.transfers.map((t) => [t.txHash, t.outcome])).toEqual([
      [unknown.txHash, 'unknown_memo'],
      [elsewhere.txHash, 'wrong_receiver'],
      [wrongToken.txHash, 'wrong_currency'],
    ])
    expect(await transfersOf(unknown.txHash)).toMatchObject([{ outcome: 'unknown_memo', payment_id: null }])
    expect(await transfersOf(elsewhere.txHash)).toMatchObject([{ outcome: 'wrong_receiver', payment_id: payment.id }])
    expect(await transfersOf(foreign.txHash)).toEqual([])
    const unchanged = (await findPayment(db, payment.id)) as PaymentRecord
    expect(unchanged.status).toBe('pending')
    expect(unchanged.crypto?.txHash).toBeNull()
    expect(Number(((await db('outbox').count({ n: '*' }).first()) as { n: number | string }).n)).toBe(outboxBefore)
  })

  it('records a transfer for a canceled payment as late, with an audit event for operators', async () => {
    const payment = await newPayment('USDC')
    await service.cancelPayment(payment.id, null, 'changed my mind', { actor: 'user:test' })
    const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
    await confirmAndPoll()

    expect(await status(payment.id)).toBe('canceled')
    expect(await transfersOf(paid.txHash)).toMatchObject([{ outcome: 'late', payment_id: payment.id }])
    const late = (await paymentEvents(db, payment.id)).filter((e) => e.eventType === 'crypto.late_transfer')
    expect(late).toHaveLength(1)
    expect(late[0]?.details).toMatchObject({ tx_hash: paid.txHash, payment_status: 'canceled', amount: '25.000000' })
    expect(await outbox(payment.id)).toEqual(['payment.canceled'])
  })

  it('continues from the persisted cursor after a restart: every transfer counted exactly once', async () => {
    const [a, b, c] = await Promise.all([newPayment('USDC'), newPayment('USDC'), newPayment('USDT')])
    if (!a || !b || !c) throw new Error('no payments')
    const paidA = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, a.crypto?.memo as string)
    await confirmAndPoll()
    expect(await status(a.id)).toBe('completed')

    const paidB = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, b.crypto?.memo as string)
    await chain.mine(1)
    expect((await provider.watcher.poll()).transfers).toEqual([])
    await provider.stop()

    // While no watcher runs: another transfer and more blocks.
    const paidC = await payToken(chain.usdt, chain.receiverAddress, USDC_OWED, c.crypto?.memo as string)
    await chain.mine(CONFIRMATIONS)

    const watcherOptions: CryptoWatcherOptions = { ...options, startBlock: 0 }
    const restarted = new CryptoWatcher(watcherOptions)
    try {
      restarted.start()
      await waitFor(async () => (await status(b.id)) === 'completed' && (await status(c.id)) === 'completed', 'the restarted watcher to complete B and C', 10_000)
    } finally {
      await restarted.stop()
    }
    for (const [payment, paid] of [
      [a, paidA],
      [b, paidB],
      [c, paidC],
    ] as const) {
      expect(await transfersOf(paid.txHash)).toHaveLength(1)
      expect(await outbox(payment.id)).toEqual(['payment.completed'])
    }
  })

  it('reads a range again without a second transition, outbox row or audit event', async () => {
    const payment = await newPayment('USDC')
    const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
    await confirmAndPoll()
    expect(await status(payment.id)).toBe('completed')
    const events = (await paymentEvents(db, payment.id)).length

    // As after a crash between reading and committing, or an operator rewinding the cursor.
    await db('crypto_watch_cursors').update({ last_confirmed_block: paid.blockNumber - 1, last_confirmed_block_hash: null })
    const again = await provider.watcher.poll()
    expect(again.fromBlock).toBe(paid.blockNumber)
    expect(again.transfers).toEqual([])
    expect(await transfersOf(paid.txHash)).toHaveLength(1)
    expect(await outbox(payment.id)).toEqual(['payment.completed'])
    expect((await paymentEvents(db, payment.id)).length).toBe(events)
  })

  it('ignores a transfer reorganised away before it had enough confirmations', async () => {
    const payment = await newPayment('USDC')
    await provider.watcher.poll()
    const snapshot = await chain.snapshot()
    const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
    await chain.mine(CONFIRMATIONS - 1)
    expect((await provider.watcher.poll()).transfers).toEqual([])
    await chain.revert(snapshot)

    await chain.mine(CONFIRMATIONS + 1)
    const result = await provider.watcher.poll()
    expect(result.halted).toBeUndefined()
    expect(result.toBlock).toBeGreaterThanOrEqual(paid.blockNumber)
    expect(await status(payment.id)).toBe('pending')
    expect(await transfersOf(paid.txHash)).toEqual([])
  })

  it('stops advancing, and says so in health, when a block it already read is reorganised away', async () => {
    await provider.watcher.poll()
    const snapshot = await chain.snapshot()
    await chain.mine(CONFIRMATIONS + 1)
    const read = await provider.watcher.poll()
    expect(read.toBlock).toBeGreaterThan(read.fromBlock - 1)
    await chain.revert(snapshot)
    // A transaction makes the replacement block differ from the one the watcher read.
    await minedReceipt(chain.provider, ((await chain.usdc.getFunction('transfer')(chain.otherAddress, 1n)) as { hash: string }).hash)
    await chain.mine(CONFIRMATIONS + 2)

    const halted = await provider.watcher.poll()
    expect(halted.halted).toMatch(/reorg deeper than 3 confirmations/)
    expect(halted.toBlock).toBe(read.toBlock)
    expect(await provider.health()).toMatchObject({ ok: false, error: expect.stringMatching(/no longer/) })

    // The documented operator action after reconciling: forget the stored hash.
    await db('crypto_watch_cursors').update({ last_confirmed_block_hash: null })
    const resumed = await provider.watcher.poll()
    expect(resumed.halted).toBeUndefined()
    expect(resumed.toBlock).toBe((await chain.blockNumber()) - CONFIRMATIONS)
    expect(await provider.health()).toEqual({ ok: true })
  })

  describe('session expiry and cancel never overtake a transfer the watcher has not applied', () => {
    const EXPIRY_MS = 30 * 60_000

    /** A USDC payment created at the chain's current time, with the watcher up to date. */
    async function paymentAtChainTime(): Promise<PaymentRecord> {
      await provider.watcher.poll()
      fixedNow = await chain.headTime()
      const payment = await newPayment('USDC')
      expect(payment.expiresAt.getTime()).toBe(fixedNow.getTime() + EXPIRY_MS)
      return payment
    }

    /**
     * Runs the expiry job with the service's clock past the payment's expiry, and past any
     * back-off an earlier run left on it (at most an hour); the chain's blocks stay where they are.
     */
    async function expireLater(payment: PaymentRecord): Promise<void> {
      fixedNow = new Date(Math.max(fixedNow?.getTime() ?? 0, payment.expiresAt.getTime()) + 2 * 3_600_000)
      await service.expireSessions()
    }

    /** The next blocks are stamped after the payment's expiry. */
    async function chainPastExpiry(payment: PaymentRecord): Promise<void> {
      await chain.increaseTime(Math.ceil((payment.expiresAt.getTime() - (await chain.headTime()).getTime()) / 1000) + 60)
    }

    it('keeps a payment whose transfer was mined before expiry but not yet confirmed, and completes it on confirmation', async () => {
      const payment = await paymentAtChainTime()
      const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
      await chain.mine(CONFIRMATIONS - 1)
      expect((await provider.watcher.poll()).transfers).toEqual([])

      await expireLater(payment)
      expect(await status(payment.id)).toBe('pending')

      await chain.mine(1)
      expect((await provider.watcher.poll()).transfers.map((t) => [t.txHash, t.outcome])).toEqual([[paid.txHash, 'matched']])
      expect(await status(payment.id)).toBe('completed')
      expect(await outbox(payment.id)).toEqual(['payment.completed'])
    })

    it('does not expire a payment while the watcher lags behind its expiry: a confirmed transfer it has not read yet completes it', async () => {
      const payment = await paymentAtChainTime()
      const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
      // Blocks stamped after the expiry confirm the transfer, but the watcher has not read them.
      await chainPastExpiry(payment)
      await chain.mine(CONFIRMATIONS + 2)

      await expireLater(payment)
      expect(await status(payment.id)).toBe('pending')

      await provider.watcher.poll()
      expect(await status(payment.id)).toBe('completed')
      expect(await transfersOf(paid.txHash)).toMatchObject([{ outcome: 'matched', payment_id: payment.id }])
      expect(await outbox(payment.id)).toEqual(['payment.completed'])
    })

    it('expires an unpaid payment once the watcher has applied a block stamped after its expiry; a transfer after that is late', async () => {
      const payment = await paymentAtChainTime()
      await expireLater(payment)
      expect(await status(payment.id)).toBe('pending')

      await chainPastExpiry(payment)
      // Mined after the expiry, but not yet confirmed: the watcher has not applied it.
      await chain.mine(1)
      await provider.watcher.poll()
      await expireLater(payment)
      expect(await status(payment.id)).toBe('pending')

      await confirmAndPoll()
      await expireLater(payment)
      const expired = (await findPayment(db, payment.id)) as PaymentRecord
      expect(expired.status).toBe('canceled')
      expect(expired.failureReason).toBe('session expired')

      const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
      await confirmAndPoll()
      expect(await transfersOf(paid.txHash)).toMatchObject([{ outcome: 'late', payment_id: payment.id }])
      expect(await outbox(payment.id)).toEqual(['payment.canceled'])
    })

    it('expires a payment whose transfer, mined before its expiry, was reorganised away before its confirmations', async () => {
      const payment = await paymentAtChainTime()
      const snapshot = await chain.snapshot()
      const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, payment.crypto?.memo as string)
      await chain.mine(CONFIRMATIONS - 1)
      await provider.watcher.poll()
      await expireLater(payment)
      expect(await status(payment.id)).toBe('pending')

      await chain.revert(snapshot)
      await chainPastExpiry(payment)
      await chain.mine(CONFIRMATIONS + 1)
      await provider.watcher.poll()
      await expireLater(payment)
      expect(await status(payment.id)).toBe('canceled')
      expect(await transfersOf(paid.txHash)).toEqual([])
    })

    it("refuses a customer's cancel while a transfer paying the payment waits for its confirmations, then completes it", async () => {
      const short = await newPayment('USDC')
      const full = await newPayment('USDC')
      const underpaid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED - 1n, short.crypto?.memo as string)
      const paid = await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, full.crypto?.memo as string)
      await chain.mine(CONFIRMATIONS - 2)
      expect((await provider.watcher.poll()).transfers).toEqual([])

      await expect(service.cancelPayment(full.id, null, 'changed my mind', { actor: 'user:test' })).rejects.toThrow(/has been paid at its provider/)
      // A transfer that does not pay in full does not hold the cancel back.
      expect((await service.cancelPayment(short.id, null, 'changed my mind', { actor: 'user:test' })).status).toBe('canceled')
      expect(await status(full.id)).toBe('pending')

      await confirmAndPoll()
      expect(await status(full.id)).toBe('completed')
      expect(await transfersOf(paid.txHash)).toMatchObject([{ outcome: 'matched', payment_id: full.id }])
      expect(await transfersOf(underpaid.txHash)).toMatchObject([{ outcome: 'late', payment_id: short.id }])
    })
  })

  // What 25 USDC (0.01 ETH) is worth, in currencies with 0, 2 and 3 decimals (ISO 4217).
  it.each([
    { currency: 'JPY', price: 3_750, usdc: '150.00', eth: '375000.00' },
    { currency: 'USD', price: 2_500, usdc: '1.00', eth: '2500.00' },
    { currency: 'KWD', price: 7_700, usdc: '0.308', eth: '770.000' },
  ])('prices in $currency minor units: the quote, the payment and the transfer that completes it agree', async ({ currency, price, usdc, eth }) => {
    const local = parsePricingConfig({ currency, pricing: { 'eth-mainnet': { full: { '1m': price } } }, crypto: { supported_currencies: ['USDC', 'ETH'], exchange_rates: { USDC: usdc, ETH: eth } } })
    const priced = new PaymentService({ db, logger, pricing: () => local, providers: new ProviderRegistry([provider]), now })
    const items = [{ chain_profile_id: 'eth-mainnet', node_type: 'full', duration: '1m' }]
    const pay = (cryptoCurrency: CryptoCurrency, quoteId?: string) =>
      priced.initiatePayment(
        {
          customer: { id: crypto.randomUUID() },
          items,
          method: 'crypto',
          crypto_currency: cryptoCurrency,
          idempotency_key: crypto.randomUUID(),
          return_url: 'https://app.example/return',
          cancel_url: 'https://app.example/cancel',
          ...(quoteId ? { quote_id: quoteId } : {}),
        },
        { actor: 'user:test' },
      )

    const quote = await priced.getQuote({ items })
    expect(quote).toMatchObject({ amountMinor: price, currency, cryptoAmounts: { USDC: '25.000000', ETH: '0.010000000000000000' } })
    const quoted = (await pay('USDC', quote.id)).payment
    expect(quoted).toMatchObject({ amountMinor: price, currency, crypto: { currency: 'USDC', amount: '25.000000', amountBaseUnits: USDC_OWED.toString() } })
    const unquoted = (await pay('ETH')).payment
    expect(unquoted).toMatchObject({ amountMinor: price, currency, crypto: { currency: 'ETH', amount: '0.010000000000000000', amountBaseUnits: ETH_OWED.toString() } })

    await payToken(chain.usdc, chain.receiverAddress, USDC_OWED, quoted.crypto?.memo as string)
    await payEth(chain.receiverAddress, ETH_OWED, unquoted.crypto?.memo as string)
    await confirmAndPoll()
    expect(await status(quoted.id)).toBe('completed')
    expect(await status(unquoted.id)).toBe('completed')
    for (const id of [quoted.id, unquoted.id]) {
      const completed = (await paymentEvents(db, id)).find((e) => e.eventType === 'payment.completed')
      expect(completed?.details.overpaid_base_units).toBeUndefined()
    }
  })

  it('fails the payment at initiation when its currency has no contract', async () => {
    const usdcOnly = new CryptoProvider({ ...options, contracts: parseTokenContracts(`USDC=${String(chain.usdc.target)}`) })
    const strict = new PaymentService({ db, logger, pricing: () => pricing, providers: new ProviderRegistry([usdcOnly]) })
    try {
      const attempt = strict.initiatePayment(
        {
          customer: { id: crypto.randomUUID() },
          items: [{ chain_profile_id: 'eth-mainnet', node_type: 'full', duration: '1m' }],
          method: 'crypto',
          crypto_currency: 'USDT',
          idempotency_key: 'usdt-without-contract',
          return_url: 'https://app.example/return',
          cancel_url: 'https://app.example/cancel',
        },
        { actor: 'user:test' },
      )
      await expect(attempt).rejects.toBeInstanceOf(UnavailableError)
      const row = (await db('payments').where({ idempotency_key: 'usdt-without-contract' }).first('status')) as { status: string }
      expect(row.status).toBe('failed')
      await expect(usdcOnly.initiatePayment({ crypto: { currency: 'USDT' } } as PaymentRecord)).rejects.toThrow(/no USDT contract is configured/)
    } finally {
      await usdcOnly.stop()
    }
  })
})
