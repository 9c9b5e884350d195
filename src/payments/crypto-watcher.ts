/**
 * The crypto provider's background watcher (docs/payments-crypto.md): follows `TransferWithMemo`
 * logs of the configured token contracts (and the ETH memo router) over confirmed blocks only,
 * i.e. [cursor + 1, head - confirmations], in bounded ranges. Each range is one database
 * transaction: every log's `crypto_transfers` row, its effect on the payment (completed, failed,
 * audit event) and the cursor move commit together, so a crash replays the whole range and a
 * log already recorded is skipped: no transfer is missed or counted twice, across restarts.
 *
 * Reorgs within the confirmation depth never reach us (only confirmed blocks are read). A reorg
 * deeper than that is out of scope: the watcher notices that the cursor block's hash changed,
 * logs an error and stops advancing until an operator reconciles (docs: "Reorgs").
 */
import { getAddress, Interface, JsonRpcProvider, zeroPadValue, type Log } from 'ethers'
import { lockRow } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import { UnavailableError } from '../errors.js'
import type { Logger } from '../log.js'
import { providerFailure, redactProviderError, rpcUrlRedactions, type Redaction } from './provider-errors.js'
import { formatTokenAmount } from './pricing.js'
import type { CryptoCurrency } from './states.js'
import { completeLockedPayment, findPaymentByMemo, findPaymentForUpdate, recordPaymentEvent, transitionPayment, type AuditContext, type PaymentRecord } from './store.js'

export const CRYPTO_PROVIDER_NAME = 'crypto'

const EVENT_ABI = 'event TransferWithMemo(address indexed from, address indexed to, uint256 value, bytes32 indexed memo)'
const eventInterface = new Interface([EVENT_ABI])
export const TRANSFER_WITH_MEMO_TOPIC = (eventInterface.getEvent('TransferWithMemo') as NonNullable<ReturnType<Interface['getEvent']>>).topicHash

/** Blocks per getLogs call (public RPC endpoints commonly refuse larger ranges). */
export const DEFAULT_MAX_BLOCK_RANGE = 2_000
const RPC_TIMEOUT_MS = 10_000
const CONTEXT: AuditContext = { actor: 'provider:crypto' }

/**
 * What became of a transfer that carries one of our memos or reaches our receiver (a transfer
 * that does neither belongs to someone else and is not recorded).
 */
export type TransferOutcome = 'matched' | 'underpaid' | 'wrong_receiver' | 'wrong_currency' | 'unknown_memo' | 'late'

export interface ObservedTransfer {
  chain: string
  txHash: string
  logIndex: number
  blockNumber: number
  blockHash: string
  contractAddress: string
  currency: CryptoCurrency
  from: string
  to: string
  amountBaseUnits: bigint
  memo: string
  paymentId: string | null
  outcome: TransferOutcome
}

export interface PollResult {
  /** First block read; greater than toBlock when there was nothing new to read. */
  fromBlock: number
  /** Last block read (the cursor after this poll). */
  toBlock: number
  /** Transfers recorded by this poll (a log seen before is not repeated). */
  transfers: ObservedTransfer[]
  /** Set when the watcher refuses to advance (the cursor block is no longer canonical). */
  halted?: string
}

export interface CryptoWatcherOptions {
  db: Db
  logger: Logger
  now: () => Date
  rpcUrl: string
  receiverAddress: string
  /** Currency -> contract address (the ETH entry is the EthMemoRouter). */
  contracts: ReadonlyMap<CryptoCurrency, string>
  confirmations: number
  pollIntervalMs: number
  /** First block to read when no cursor is stored; default: the newest confirmed block. */
  startBlock?: number
  maxBlockRange?: number
}

/** The pure decision for one transfer (payment already locked, or absent). */
export function classifyTransfer(input: { toReceiver: boolean; payment: PaymentRecord | undefined; currency: CryptoCurrency; amount: bigint }): TransferOutcome | undefined {
  const { payment } = input
  if (!payment?.crypto) return input.toReceiver ? 'unknown_memo' : undefined
  if (!input.toReceiver) return 'wrong_receiver'
  if (input.currency !== payment.crypto.currency) return 'wrong_currency'
  if (payment.status !== 'pending') return 'late'
  return input.amount < BigInt(payment.crypto.amountBaseUnits) ? 'underpaid' : 'matched'
}

async function fetchChainId(rpcUrl: string): Promise<number> {
  let response: Response
  try {
    response = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(RPC_TIMEOUT_MS),
    })
  } catch (err) {
    throw new UnavailableError(`crypto RPC ${new URL(rpcUrl).host} is unreachable: ${(err as Error).message}`)
  }
  const body = (await response.json().catch(() => undefined)) as { result?: unknown } | undefined
  if (!response.ok || typeof body?.result !== 'string') throw new UnavailableError(`crypto RPC ${new URL(rpcUrl).host} did not answer eth_chainId (HTTP ${response.status})`)
  return Number(BigInt(body.result))
}

interface Connection {
  rpc: JsonRpcProvider
  chainId: number
  chain: string
}

interface Cursor {
  block: number
  hash: string | null
}

/** A transfer in full payment of a payment, in a block the watcher has not applied yet. */
export interface UnappliedPayment {
  txHash: string
  blockNumber: number
}

/** Ranges a cancel reads at most for unapplied transfers (a watcher further behind is lagging). */
const MAX_UNAPPLIED_RANGES = 10

export class CryptoWatcher {
  private readonly log: Logger
  private readonly redactions: readonly Redaction[]
  private readonly currencyByContract: Map<string, CryptoCurrency>
  private readonly receiver: string
  private connection: Promise<Connection> | undefined
  private running: Promise<PollResult> | undefined
  private timer: NodeJS.Timeout | undefined
  private stopped = true
  private haltedReason: string | undefined
  private lastPollAt: Date | undefined
  private appliedBlockTime: { block: number; hash: string; timestamp: Date } | undefined

  constructor(private readonly options: CryptoWatcherOptions) {
    this.log = options.logger.child({ component: 'crypto-watcher' })
    this.redactions = rpcUrlRedactions(options.rpcUrl)
    this.currencyByContract = new Map([...options.contracts].map(([currency, address]) => [address.toLowerCase(), currency]))
    this.receiver = options.receiverAddress.toLowerCase()
  }

  /**
   * Every error leaving the watcher goes through this: none carries the RPC URL (its API key)
   * into a log line, `payment_retries.last_error` or an answer.
   */
  private redacted(err: unknown): Error {
    return redactProviderError(err, 'crypto watcher', this.redactions)
  }

  /** The chain the RPC serves (asked once, then remembered). */
  async chainId(): Promise<number> {
    try {
      return (await this.connect()).chainId
    } catch (err) {
      throw this.redacted(err)
    }
  }

  private connect(): Promise<Connection> {
    this.connection ??= fetchChainId(this.options.rpcUrl).then(
      (chainId) => ({
        chainId,
        chain: `evm:${chainId}`,
        // A static network: ethers would otherwise retry network detection forever in the background.
        rpc: new JsonRpcProvider(this.options.rpcUrl, chainId, { staticNetwork: true, batchMaxCount: 1, cacheTimeout: -1 }),
      }),
      (err: unknown) => {
        this.connection = undefined
        throw err
      },
    )
    return this.connection
  }

  /** Reads every newly confirmed block once; concurrent calls share one run. */
  poll(): Promise<PollResult> {
    this.running ??= this.pollOnce()
      .catch((err: unknown) => {
        throw this.redacted(err)
      })
      .then((result) => {
        this.lastPollAt = this.options.now()
        return result
      })
      .finally(() => {
        this.running = undefined
      })
    return this.running
  }

  /** When a poll last finished without an error (readiness: is the watcher keeping up?). */
  get lastSuccessfulPollAt(): Date | undefined {
    return this.lastPollAt
  }

  private async pollOnce(): Promise<PollResult> {
    const { rpc, chain } = await this.connect()
    const head = await rpc.getBlockNumber()
    const confirmed = head - this.options.confirmations
    const cursor = (await this.readCursor(chain)) ?? (await this.initCursor(rpc, chain, confirmed))

    if (cursor.hash !== null && cursor.block >= 0) {
      const block = await rpc.getBlock(cursor.block)
      if (block?.hash?.toLowerCase() !== cursor.hash.toLowerCase()) {
        this.haltedReason =
          `block ${cursor.block} on ${chain} is no longer ${cursor.hash} (now ${block?.hash ?? 'missing'}): a reorg deeper than ${this.options.confirmations} confirmations; ` +
          'the watcher does not advance until an operator reconciles (docs/payments-crypto.md, Reorgs)'
        this.log.error({ chain, block: cursor.block, stored_hash: cursor.hash, canonical_hash: block?.hash ?? null }, this.haltedReason)
        return { fromBlock: cursor.block + 1, toBlock: cursor.block, transfers: [], halted: this.haltedReason }
      }
    }
    this.haltedReason = undefined

    const transfers: ObservedTransfer[] = []
    const maxRange = this.options.maxBlockRange ?? DEFAULT_MAX_BLOCK_RANGE
    let last = cursor.block
    while (last < confirmed) {
      const from = last + 1
      const to = Math.min(confirmed, last + maxRange)
      const [logs, block] = await Promise.all([rpc.getLogs({ address: [...this.options.contracts.values()], topics: [TRANSFER_WITH_MEMO_TOPIC], fromBlock: from, toBlock: to }), rpc.getBlock(to)])
      if (!block?.hash) throw new UnavailableError(`crypto RPC has no block ${to} on ${chain}`)
      const applied = await this.applyRange(chain, last, to, block.hash, logs)
      // Another watcher moved the cursor meanwhile; it has this range, we stop here.
      if (!applied) break
      transfers.push(...applied)
      last = to
    }
    return { fromBlock: cursor.block + 1, toBlock: last, transfers }
  }

  /**
   * How far in time the applied blocks reach: the timestamp of the cursor block (undefined before
   * the first run). Block timestamps grow along the chain, so every block stamped before it has
   * been applied, and each transfer in those blocks has already had its effect on its payment.
   */
  async appliedUntil(): Promise<Date | undefined> {
    try {
      return await this.readAppliedUntil()
    } catch (err) {
      throw this.redacted(err)
    }
  }

  private async readAppliedUntil(): Promise<Date | undefined> {
    const { rpc, chain } = await this.connect()
    const cursor = await this.readCursor(chain)
    if (!cursor || cursor.block < 0) return undefined
    const cached = this.appliedBlockTime
    if (cached && cached.block === cursor.block && cached.hash === cursor.hash?.toLowerCase()) return cached.timestamp
    const block = await rpc.getBlock(cursor.block)
    if (!block?.hash) throw new UnavailableError(`crypto RPC has no block ${cursor.block} on ${chain}`)
    if (cursor.hash !== null && block.hash.toLowerCase() !== cursor.hash.toLowerCase()) {
      throw new UnavailableError(`block ${cursor.block} on ${chain} is no longer ${cursor.hash}: the watcher is halted by a deep reorg (docs/payments-crypto.md, Reorgs)`)
    }
    const timestamp = new Date(block.timestamp * 1000)
    this.appliedBlockTime = { block: cursor.block, hash: block.hash.toLowerCase(), timestamp }
    return timestamp
  }

  /**
   * A transfer paying `payment` in full (its memo, token and our receiver) in the blocks after the
   * cursor, confirmed or not: the watcher completes the payment when it gets there, so a cancel
   * must not overtake it. Throws when the watcher is too far behind to look through quickly.
   */
  async findUnappliedPayment(payment: PaymentRecord): Promise<UnappliedPayment | undefined> {
    try {
      return await this.searchUnapplied(payment)
    } catch (err) {
      throw this.redacted(err)
    }
  }

  private async searchUnapplied(payment: PaymentRecord): Promise<UnappliedPayment | undefined> {
    const contract = payment.crypto ? this.options.contracts.get(payment.crypto.currency) : undefined
    if (!payment.crypto || !contract) return undefined
    const owed = BigInt(payment.crypto.amountBaseUnits)
    const { rpc, chain } = await this.connect()
    const head = await rpc.getBlockNumber()
    const cursor = await this.readCursor(chain)
    const first = (cursor?.block ?? -1) + 1
    const maxRange = this.options.maxBlockRange ?? DEFAULT_MAX_BLOCK_RANGE
    if (head - first + 1 > maxRange * MAX_UNAPPLIED_RANGES) {
      throw new UnavailableError(`the crypto watcher is ${head - first + 1} blocks behind the head of ${chain}; a payment cannot be canceled until it catches up`)
    }
    const topics = [TRANSFER_WITH_MEMO_TOPIC, null, zeroPadValue(this.receiver, 32), payment.crypto.memo.toLowerCase()]
    for (let from = first; from <= head; from += maxRange) {
      const logs = await rpc.getLogs({ address: contract, topics, fromBlock: from, toBlock: Math.min(head, from + maxRange - 1) })
      for (const log of logs) {
        let value: bigint | undefined
        try {
          value = BigInt(eventInterface.parseLog({ topics: [...log.topics], data: log.data })?.args.value as bigint)
        } catch {
          value = undefined // not decodable: the watcher skips it too
        }
        if (value !== undefined && value >= owed) return { txHash: log.transactionHash.toLowerCase(), blockNumber: log.blockNumber }
      }
    }
    return undefined
  }

  private async readCursor(chain: string): Promise<Cursor | undefined> {
    const row = (await this.options.db('crypto_watch_cursors').where({ chain }).first()) as { last_confirmed_block: number | string; last_confirmed_block_hash: string | null } | undefined
    return row ? { block: Number(row.last_confirmed_block), hash: row.last_confirmed_block_hash } : undefined
  }

  /** First run: persisted at once, so a restart before the first transfer still starts here. */
  private async initCursor(rpc: JsonRpcProvider, chain: string, confirmed: number): Promise<Cursor> {
    const block = (this.options.startBlock ?? Math.max(0, confirmed)) - 1
    const hash = block >= 0 && block <= confirmed ? ((await rpc.getBlock(block))?.hash ?? null) : null
    await this.options.db('crypto_watch_cursors').insert({ chain, last_confirmed_block: block, last_confirmed_block_hash: hash, updated_at: this.options.now() }).onConflict('chain').ignore()
    this.log.info({ chain, first_block: block + 1 }, 'crypto watcher starts following the chain')
    return (await this.readCursor(chain)) as Cursor
  }

  /** One range in one transaction; undefined when the cursor is no longer where we started. */
  private applyRange(chain: string, expected: number, to: number, toHash: string, logs: readonly Log[]): Promise<ObservedTransfer[] | undefined> {
    const ordered = [...logs].sort((a, b) => a.blockNumber - b.blockNumber || a.index - b.index)
    return this.options.db.transaction(async (trx) => {
      // The lock serialises watchers of the same chain (Postgres); SQLite has one writer anyway.
      const row = (await lockRow(trx, trx('crypto_watch_cursors').where({ chain }).first('last_confirmed_block'))) as { last_confirmed_block: number | string } | undefined
      if (!row || Number(row.last_confirmed_block) !== expected) return undefined
      const recorded: ObservedTransfer[] = []
      for (const log of ordered) {
        const transfer = await this.applyLog(trx, chain, log)
        if (transfer) recorded.push(transfer)
      }
      await trx('crypto_watch_cursors').where({ chain }).update({ last_confirmed_block: to, last_confirmed_block_hash: toHash, updated_at: this.options.now() })
      return recorded
    })
  }

  private async applyLog(trx: Queryable, chain: string, log: Log): Promise<ObservedTransfer | undefined> {
    const currency = this.currencyByContract.get(log.address.toLowerCase())
    let parsed: ReturnType<Interface['parseLog']>
    try {
      parsed = eventInterface.parseLog({ topics: [...log.topics], data: log.data })
    } catch {
      parsed = null
    }
    if (!currency || !parsed) {
      this.log.warn({ chain, tx_hash: log.transactionHash, log_index: log.index, contract: log.address }, 'a log with the TransferWithMemo topic could not be decoded; skipped')
      return undefined
    }
    const txHash = log.transactionHash.toLowerCase()
    if (await trx('crypto_transfers').where({ chain, tx_hash: txHash, log_index: log.index }).first('id')) return undefined

    const to = getAddress(String(parsed.args.to))
    const memo = String(parsed.args.memo).toLowerCase()
    const amount = BigInt(parsed.args.value as bigint)
    const byMemo = await findPaymentByMemo(trx, memo)
    const payment = byMemo && byMemo.provider === CRYPTO_PROVIDER_NAME && byMemo.method === 'crypto' ? await findPaymentForUpdate(trx, byMemo.id) : undefined
    const outcome = classifyTransfer({ toReceiver: to.toLowerCase() === this.receiver, payment, currency, amount })
    if (!outcome) return undefined

    const transfer: ObservedTransfer = {
      chain,
      txHash,
      logIndex: log.index,
      blockNumber: log.blockNumber,
      blockHash: log.blockHash.toLowerCase(),
      contractAddress: getAddress(log.address),
      currency,
      from: getAddress(String(parsed.args.from)),
      to,
      amountBaseUnits: amount,
      memo,
      paymentId: payment?.id ?? null,
      outcome,
    }
    await trx('crypto_transfers').insert({
      chain,
      tx_hash: txHash,
      log_index: transfer.logIndex,
      block_number: transfer.blockNumber,
      block_hash: transfer.blockHash,
      contract_address: transfer.contractAddress,
      currency,
      from_address: transfer.from,
      to_address: to,
      amount_base_units: amount.toString(),
      memo,
      payment_id: transfer.paymentId,
      outcome,
      created_at: this.options.now(),
    })
    if (payment) await this.settle(trx, payment, transfer)
    else this.log.warn({ chain, tx_hash: txHash, memo, from: transfer.from, amount: amount.toString(), currency }, 'transfer to our receiver with a memo that is no crypto payment of ours; recorded as unknown_memo')
    return transfer
  }

  /** The transfer's effect on its payment (locked by the caller's transaction). */
  private async settle(trx: Queryable, payment: PaymentRecord, transfer: ObservedTransfer): Promise<void> {
    const owed = BigInt(payment.crypto?.amountBaseUnits ?? '0')
    const now = this.options.now()
    const cryptoTx = { txHash: transfer.txHash, blockNumber: transfer.blockNumber }
    const details: Record<string, unknown> = {
      chain: transfer.chain,
      tx_hash: transfer.txHash,
      log_index: transfer.logIndex,
      block_number: transfer.blockNumber,
      from_address: transfer.from,
      to_address: transfer.to,
      contract_address: transfer.contractAddress,
      currency: transfer.currency,
      amount_base_units: transfer.amountBaseUnits.toString(),
      amount: formatTokenAmount(transfer.currency, transfer.amountBaseUnits),
    }
    const fields = { payment_id: payment.id, tx_hash: transfer.txHash, outcome: transfer.outcome }
    switch (transfer.outcome) {
      case 'matched': {
        if (transfer.amountBaseUnits > owed) details.overpaid_base_units = (transfer.amountBaseUnits - owed).toString()
        await completeLockedPayment(trx, payment, CONTEXT, now, details, cryptoTx)
        this.log.info({ ...fields, overpaid_base_units: details.overpaid_base_units }, 'crypto payment completed')
        return
      }
      case 'underpaid': {
        const failureReason = `underpaid: expected ${formatTokenAmount(transfer.currency, owed)} ${transfer.currency}, received ${formatTokenAmount(transfer.currency, transfer.amountBaseUnits)} ${transfer.currency}`
        await transitionPayment(trx, { paymentId: payment.id, to: 'failed', context: CONTEXT, failureReason, details: { ...details, expected_base_units: owed.toString() }, cryptoTx, now }, payment)
        this.log.warn({ ...fields, expected_base_units: owed.toString(), received_base_units: transfer.amountBaseUnits.toString() }, 'crypto payment underpaid; marked failed (refund is manual)')
        return
      }
      case 'late':
        await recordPaymentEvent(trx, payment.id, 'crypto.late_transfer', CONTEXT, { ...details, payment_status: payment.status }, now)
        this.log.warn({ ...fields, status: payment.status }, 'transfer for a payment that is no longer pending; recorded for operators (refund is manual)')
        return
      default:
        this.log.warn({ ...fields, currency: transfer.currency, to_address: transfer.to }, `transfer recorded as ${transfer.outcome}; the payment is unchanged`)
    }
  }

  start(): void {
    if (!this.stopped) return
    this.stopped = false
    this.schedule(0)
  }

  private schedule(delayMs: number): void {
    this.timer = setTimeout(() => {
      this.poll()
        .catch((err: unknown) => this.log.warn({ err }, 'crypto watcher poll failed; retrying at the next interval'))
        .finally(() => {
          if (!this.stopped) this.schedule(this.options.pollIntervalMs)
        })
    }, delayMs)
    this.timer.unref()
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    await this.running?.catch(() => undefined)
    const connection = await this.connection?.catch(() => undefined)
    connection?.rpc.destroy()
    this.connection = undefined
  }

  /** The RPC answers and the watcher is not halted by a deep reorg. */
  async health(): Promise<{ ok: true } | { ok: false; error: string }> {
    if (this.haltedReason) return { ok: false, error: this.haltedReason }
    try {
      const { rpc } = await this.connect()
      await Promise.race([rpc.getBlockNumber(), new Promise((_, reject) => setTimeout(() => reject(new Error('timed out')), RPC_TIMEOUT_MS).unref())])
      return { ok: true }
    } catch (err) {
      return { ok: false, error: `crypto RPC: ${providerFailure(err, this.redactions)}` }
    }
  }
}
