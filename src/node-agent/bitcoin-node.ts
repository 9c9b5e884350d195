/**
 * What the agent asks of a Bitcoin-style node (Litecoin Core, …) besides probing it, through the
 * RPC endpoint and cookie of the node's `bitcoin_rpc` probe:
 *
 * - **Key export** (`capture_keys.exports`): such a node keeps its wallet keys inside its wallet
 *   database and writes no key file of its own. Before a capture the agent has the node create
 *   the named wallet (the node generates its HD seed itself; `load_on_startup`, so it is loaded
 *   again after every restart, restore or migration) unless it has one, then has it dump the
 *   wallet (`dumpwallet`) into a private directory under `data/`, keeps only the HD seed's line
 *   (the WIF private key every wallet key derives from) at the export's path (mode 0600) and
 *   deletes the dump. The capture then reads that file like any chain-generated key.
 * - **Key restore** (inject_keys `restore`, a migration without a snapshot): after the next start
 *   the node takes the captured seed back into a wallet of that name (`restoreChainKeys`).
 * - **Flush before a backup**: the node writes its block index and UTXO set to disk only about
 *   hourly, so a live copy of its data directory would restart at its last write (on regtest,
 *   block 0) with the wallet's coins gone; `flushChainState` has it write them first.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import type { KeyExport, ProbeSpec } from '../agent-gateway/protocol.js'
import { BitcoinRpcError, createBitcoinRpcClient, flushChainState, RPC_IN_WARMUP, type BitcoinRpcClient } from './probes/bitcoin-rpc.js'
import { pendingRestoresFile } from './keys.js'
import { resolveInside, writeFileAtomic, type StateDir } from './state-dir.js'
import type { ChainSupervisor } from './supervisor.js'

export interface ExportOptions {
  logger: Logger
  /** How long the node may take to answer RPC at all (it may have just started); default: the probe's start-up grace. */
  readyTimeoutMs?: number
  /** Between attempts while the node warms up. */
  pollMs?: number
}

/** Wallet RPCs that write thousands of keys (createwallet, dumpwallet) take seconds, not the probe's timeout. */
const WALLET_CALL_TIMEOUT_MS = 120_000

export async function exportChainKeys(dir: StateDir, exports: readonly KeyExport[], probe: ProbeSpec | undefined, options: ExportOptions): Promise<void> {
  if (exports.length === 0) return
  if (probe?.type !== 'bitcoin_rpc') {
    throw new Error(`exporting ${exports.map((e) => e.path).join(', ')} needs the node's bitcoin_rpc probe to reach its wallet; this node's probe is ${probe?.type ?? 'not set'}`)
  }
  const client = createBitcoinRpcClient(probe, dir.root)
  await untilReady(client, options.readyTimeoutMs ?? probe.startup_grace_ms, options.pollMs ?? 250)
  for (const e of exports) {
    const target = resolveInside(dir.root, e.path, 'export path')
    await ensureWallet(client, e.wallet, options.logger)
    const seed = await hdSeedOf(client, dir, e.wallet)
    fs.mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 })
    writeFileAtomic(target, `${seed}\n`, 0o600)
    options.logger.info({ path: e.path, wallet: e.wallet }, 'exported the wallet seed for capture')
  }
}

/**
 * After a start: keys put back by a migration without a snapshot (inject_keys `restore`) go back
 * into the chain. `bitcoin_wallet_hd_seed`: a node without the wallet creates it blank
 * (load_on_startup) and takes the seed (`sethdseed true <WIF>`), so its addresses are the old
 * host's; a node that already has the wallet (restored some other way) is left alone. The record
 * is removed once every key is back; a failure keeps it for the next start and fails this one.
 */
export async function restoreChainKeys(dir: StateDir, probe: ProbeSpec | undefined, options: ExportOptions): Promise<string[]> {
  const file = pendingRestoresFile(dir)
  let pending: KeyExport[]
  try {
    pending = JSON.parse(fs.readFileSync(file, 'utf8')) as KeyExport[]
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  }
  if (probe?.type !== 'bitcoin_rpc') throw new Error(`restoring ${pending.map((e) => e.path).join(', ')} needs the node's bitcoin_rpc probe to reach its wallet; this node's probe is ${probe?.type ?? 'not set'}`)
  const client = createBitcoinRpcClient(probe, dir.root)
  await untilReady(client, options.readyTimeoutMs ?? probe.startup_grace_ms, options.pollMs ?? 250)
  const restored: string[] = []
  for (const e of pending) {
    const loaded = await client.call<string[]>('listwallets')
    const onDisk = await client.call<{ wallets: { name: string }[] }>('listwalletdir')
    if (!loaded.includes(e.wallet) && !onDisk.wallets.some((w) => w.name === e.wallet)) {
      const seed = fs.readFileSync(resolveInside(dir.root, e.path, 'restore path'), 'utf8').trim()
      // createwallet name disable_private_keys blank passphrase avoid_reuse descriptors load_on_startup
      await client.call('createwallet', [e.wallet, false, true, '', false, false, true], { timeoutMs: WALLET_CALL_TIMEOUT_MS })
      await client.call('sethdseed', [true, seed], { wallet: e.wallet, timeoutMs: WALLET_CALL_TIMEOUT_MS })
      options.logger.info({ path: e.path, wallet: e.wallet }, 'the node took its wallet back from the captured seed')
      restored.push(e.path)
    } else if (!loaded.includes(e.wallet)) {
      await client.call('loadwallet', [e.wallet, true], { timeoutMs: WALLET_CALL_TIMEOUT_MS })
    }
  }
  fs.rmSync(file, { force: true })
  return restored
}

/** Before a live backup: a running node behind a bitcoin_rpc probe writes its chain state to disk. */
export async function prepareBackup(dir: StateDir, supervisor: ChainSupervisor, logger: Logger): Promise<void> {
  const probe = supervisor.deployment?.probe
  if (probe?.type !== 'bitcoin_rpc' || supervisor.status().process_state !== 'running') return
  try {
    await flushChainState(probe, dir.root)
  } catch (err) {
    // A copy taken without the flush would silently lose the chain since the node's last write.
    throw new Error(`the node could not write its chain state to disk before the backup: ${err instanceof BitcoinRpcError ? err.message : 'the flush failed'}`)
  }
  logger.info('the node wrote its chain state to disk for the backup')
}

async function untilReady(client: BitcoinRpcClient, timeoutMs: number, pollMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      await client.call('getblockcount')
      return
    } catch (err) {
      // Still starting: its RPC port or cookie not there yet, or answering "in warm-up".
      const starting = err instanceof BitcoinRpcError && (err.code === RPC_IN_WARMUP || err.code === undefined)
      if (!starting || Date.now() >= deadline) {
        throw new Error(`the node's RPC did not become ready within ${Math.round(timeoutMs / 1000)} s: ${err instanceof BitcoinRpcError ? err.message : 'the call failed'}`)
      }
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs))
  }
}

async function ensureWallet(client: BitcoinRpcClient, wallet: string, logger: Logger): Promise<void> {
  const loaded = await client.call<string[]>('listwallets')
  if (loaded.includes(wallet)) return
  const onDisk = await client.call<{ wallets: { name: string }[] }>('listwalletdir')
  if (onDisk.wallets.some((w) => w.name === wallet)) {
    await client.call('loadwallet', [wallet, true], { timeoutMs: WALLET_CALL_TIMEOUT_MS })
    return
  }
  // createwallet name disable_private_keys blank passphrase avoid_reuse descriptors load_on_startup
  await client.call('createwallet', [wallet, false, false, '', false, false, true], { timeoutMs: WALLET_CALL_TIMEOUT_MS })
  logger.info({ wallet }, 'the node created its wallet')
}

/** The HD seed (WIF) of a legacy HD wallet, from a dump the node writes under data/ and that is deleted at once. */
async function hdSeedOf(client: BitcoinRpcClient, dir: StateDir, wallet: string): Promise<string> {
  const info = await client.call<{ hdseedid?: string }>('getwalletinfo', [], { wallet })
  if (!info.hdseedid) throw new Error(`wallet ${wallet} has no HD seed (a watch-only, blank or descriptor wallet) to export`)
  const dataDir = resolveInside(dir.root, 'data', 'data directory')
  const scratch = path.join(dataDir, `.nodeplane-export-${crypto.randomBytes(8).toString('hex')}`)
  fs.mkdirSync(scratch, { mode: 0o700 })
  try {
    const dump = path.join(scratch, 'wallet.dump')
    await client.call('dumpwallet', [dump], { wallet, timeoutMs: WALLET_CALL_TIMEOUT_MS })
    const text = fs.readFileSync(dump, 'utf8')
    // `<WIF> <time> hdseed=1 # addr=<address>`: the seed the wallet's keys are derived from.
    const line = text.split('\n').find((l) => / hdseed=1(\s|$)/.test(l))
    const wif = line?.split(' ')[0]
    if (!wif || !/^[1-9A-HJ-NP-Za-km-z]{51,52}$/.test(wif)) throw new Error(`the dump of wallet ${wallet} holds no HD seed`)
    return wif
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true })
  }
}
