/**
 * A sent transaction's receipt, polled with plain eth_getTransactionReceipt calls. Not
 * `tx.wait()`: its block listener can leave a receipt request in flight that destroying the
 * provider afterwards rejects with no one to catch it (vitest counts it as an error of the run).
 */
import type { Provider, TransactionReceipt } from 'ethers'
import { waitFor } from './ports.js'

export function minedReceipt(provider: Provider, txHash: string, timeoutMs = 15_000): Promise<TransactionReceipt> {
  return waitFor(() => provider.getTransactionReceipt(txHash).then((r) => r ?? undefined), `transaction ${txHash} to be mined`, timeoutMs, 50)
}
