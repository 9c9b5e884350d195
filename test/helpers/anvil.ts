/**
 * Talking to an ethereum-anvil node a node agent runs (chains/ethereum-anvil): its JSON-RPC URL
 * is the port the profile's run.args gave anvil, as the agent recorded them in its state
 * directory's active.json; transactions are signed with anvil's first development account.
 */
import fs from 'node:fs'
import path from 'node:path'
import { JsonRpcProvider } from 'ethers'
import { waitFor } from './ports.js'

/** The first of anvil's ten development accounts (its well-known test mnemonic), funded at genesis. */
export const DEV_ACCOUNT_KEY = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80'

/** `http://127.0.0.1:<port>` of the anvil the agent with this state directory runs. */
export function anvilRpcUrl(stateDir: string): string {
  const active = JSON.parse(fs.readFileSync(path.join(stateDir, 'active.json'), 'utf8')) as { run: { args: string[] } }
  return `http://127.0.0.1:${active.run.args[active.run.args.indexOf('--port') + 1]}`
}

/**
 * An ethers provider on that anvil once it answers (a start succeeds once anvil stayed up through
 * the settle period, not once it listens), destroyed after `use`.
 */
export async function withAnvil<T>(stateDir: string, use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> {
  const provider = new JsonRpcProvider(anvilRpcUrl(stateDir), undefined, { staticNetwork: true, pollingInterval: 100 })
  try {
    await waitFor(() => provider.getBlockNumber().then((height) => ({ height }), () => undefined), 'anvil to answer', 15_000, 100)
    return await use(provider)
  } finally {
    provider.destroy()
  }
}
