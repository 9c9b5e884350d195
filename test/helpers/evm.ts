/**
 * A real EVM chain for the crypto provider tests: an in-process ganache server on a free port
 * (instamine: every transaction is mined in its own block at once), with the two contracts in
 * contracts/ compiled by solc-js and deployed: MemoToken as USDC and USDT (6 decimals) and the
 * EthMemoRouter for ETH.
 */
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Contract, ContractFactory, getAddress, JsonRpcProvider, NonceManager, Wallet, type InterfaceAbi } from 'ethers'
import ganache from 'ganache'
import { freePort } from './ports.js'

const CONTRACTS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../contracts')
export const CHAIN_ID = 1337
/** Minted to the deployer of each token: one million whole tokens. */
const INITIAL_SUPPLY = 1_000_000n * 10n ** 6n

interface Compiled {
  abi: InterfaceAbi
  bytecode: string
}

/** solc-js ships no types; this is the one call we make. */
interface Solc {
  compile(input: string): string
}

interface SolcOutput {
  errors?: Array<{ severity: 'error' | 'warning' | 'info'; formattedMessage: string }>
  contracts: Record<string, Record<string, { abi: InterfaceAbi; evm: { bytecode: { object: string } } }>>
}

let compiled: Promise<Record<'MemoToken' | 'EthMemoRouter', Compiled>> | undefined

/** Compiles contracts/*.sol once per process (solc-js bundles its compiler: no download). */
export function compileContracts(): Promise<Record<'MemoToken' | 'EthMemoRouter', Compiled>> {
  compiled ??= (async () => {
    const solc = createRequire(import.meta.url)('solc') as Solc
    const sources: Record<string, { content: string }> = {}
    for (const file of ['MemoToken.sol', 'EthMemoRouter.sol']) sources[file] = { content: fs.readFileSync(path.join(CONTRACTS_DIR, file), 'utf8') }
    const input = {
      language: 'Solidity',
      sources,
      // paris: no PUSH0 / MCOPY, so any EVM chain (and ganache's default hardfork) runs it.
      settings: { evmVersion: 'paris', optimizer: { enabled: true, runs: 200 }, outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } } },
    }
    const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput
    const errors = (output.errors ?? []).filter((e) => e.severity === 'error')
    if (errors.length > 0) throw new Error(`solc: ${errors.map((e) => e.formattedMessage).join('\n')}`)
    const pick = (file: string, name: string): Compiled => {
      const c = output.contracts[file]?.[name]
      if (!c) throw new Error(`solc produced no ${name}`)
      return { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}` }
    }
    return { MemoToken: pick('MemoToken.sol', 'MemoToken'), EthMemoRouter: pick('EthMemoRouter.sol', 'EthMemoRouter') }
  })()
  return compiled
}

export interface EvmChain {
  rpcUrl: string
  chainId: number
  provider: JsonRpcProvider
  /** Deployer of the contracts and holder of every token. */
  payer: NonceManager
  payerAddress: string
  /** Our receiving address (a ganache account, so it can receive ETH). */
  receiverAddress: string
  /** Another funded account: "someone else". */
  otherAddress: string
  usdc: Contract
  usdt: Contract
  router: Contract
  /** CURRENCY=0x… text as CRYPTO_TOKEN_CONTRACTS takes it. */
  tokenContractsText: string
  blockNumber(): Promise<number>
  mine(blocks?: number): Promise<void>
  /** Stamps the blocks mined from now on `seconds` later (block time only moves forward). */
  increaseTime(seconds: number): Promise<void>
  /** The newest block's timestamp. */
  headTime(): Promise<Date>
  snapshot(): Promise<string>
  revert(id: string): Promise<void>
  stop(): Promise<void>
}

export async function startEvmChain(): Promise<EvmChain> {
  const artifacts = await compileContracts()
  const port = await freePort()
  const server = ganache.server({ logging: { quiet: true }, chain: { chainId: CHAIN_ID }, wallet: { deterministic: true, totalAccounts: 4 }, miner: { instamine: 'eager' } })
  await server.listen(port, '127.0.0.1')
  const accounts = Object.entries(server.provider.getInitialAccounts())
  const [payerAccount, receiverAccount, otherAccount] = accounts
  if (!payerAccount || !receiverAccount || !otherAccount) throw new Error('ganache gave fewer than three accounts')

  const rpcUrl = `http://127.0.0.1:${port}`
  const provider = new JsonRpcProvider(rpcUrl, CHAIN_ID, { staticNetwork: true, batchMaxCount: 1, cacheTimeout: -1 })
  provider.pollingInterval = 50
  const payer = new NonceManager(new Wallet(payerAccount[1].secretKey, provider))

  const deploy = async (artifact: Compiled, ...args: unknown[]): Promise<Contract> => {
    const contract = await new ContractFactory(artifact.abi, artifact.bytecode, payer).deploy(...args)
    await contract.waitForDeployment()
    return contract as Contract
  }
  const usdc = await deploy(artifacts.MemoToken, 'USD Coin (test)', 'USDC', 6, INITIAL_SUPPLY)
  const usdt = await deploy(artifacts.MemoToken, 'Tether USD (test)', 'USDT', 6, INITIAL_SUPPLY)
  const router = await deploy(artifacts.EthMemoRouter)
  const address = (c: Contract) => c.target as string

  const send = (method: string, params: unknown[]) => provider.send(method, params)
  return {
    rpcUrl,
    chainId: CHAIN_ID,
    provider,
    payer,
    payerAddress: await payer.getAddress(),
    receiverAddress: getAddress(receiverAccount[0]),
    otherAddress: getAddress(otherAccount[0]),
    usdc,
    usdt,
    router,
    tokenContractsText: `USDC=${address(usdc)},USDT=${address(usdt)},ETH=${address(router)}`,
    blockNumber: () => provider.getBlockNumber(),
    async mine(blocks = 1) {
      await send('evm_mine', [{ blocks }])
    },
    async increaseTime(seconds: number) {
      await send('evm_increaseTime', [seconds])
    },
    async headTime() {
      const block = await provider.getBlock('latest')
      if (!block) throw new Error('ganache has no latest block')
      return new Date(block.timestamp * 1000)
    },
    async snapshot() {
      return String(await send('evm_snapshot', []))
    },
    async revert(id: string) {
      const ok = (await send('evm_revert', [id])) as boolean
      if (!ok) throw new Error(`evm_revert ${id} refused`)
      // The nonce manager counted the reverted transactions; ask the chain again.
      payer.reset()
    },
    async stop() {
      provider.destroy()
      await server.close()
    },
  }
}
