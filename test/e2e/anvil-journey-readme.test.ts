import { JsonRpcProvider, Wallet, parseEther } from 'ethers'
import { describe, expect, it } from 'vitest'
import { DEV_ACCOUNT_KEY, withAnvil } from '../helpers/anvil.js'
import { waitFor } from '../helpers/ports.js'
import { useJourneyStack } from './chain-journey-stack.js'
import { minedReceipt } from '../helpers/receipts.js'

/**
 * The README's anvil example through the binary, with the catalogue as shipped: `nodeplane up`
 * offers ethereum-anvil in `chain list`; a subscription bought with the test card provider gets a
 * node running the real anvil 1.7.1 (the shipped default, the latest release), healthy, found the README's way (its
 * port in the host's active.json); `web3_clientVersion` says anvil/v1.7.1 and a transaction sent
 * with ethers is mined. The rest of the journey (rollouts, a broken build, migrations) is
 * anvil-journey.suite.ts, on both databases.
 */
describe('the README anvil example on nodeplane up', () => {
  const s = useJourneyStack('sqlite')

  it('chain list offers it; subscribe, pay, healthy on anvil 1.7.1; a transaction is mined', { timeout: 120_000 }, async () => {
    const catalogue = s.json<{ chains: Array<{ id: string; versions: string[]; default_version: string }> }>(await s.run(['chain', 'list', '--json']))
    expect(catalogue.chains.find((c) => c.id === 'ethereum-anvil')).toMatchObject({ default_version: '1.7.1', versions: ['1.5.1', '1.7.0', '1.7.1'] })

    const node = await s.untilBought(await s.subscribeAndPay('ethereum-anvil', 'full'), 'ethereum-anvil')
    expect(node.binary_version).toBe('1.7.1')
    // The README's way: the node's endpoint on the rpc-gateway `up` runs, with a nodes:rpc key.
    const shown = s.json<{ endpoints: { http: string } }>(await s.run(['node', 'show', '--id', node.id, '--json']))
    expect(shown.endpoints.http).toBe(`${s.stack.rpc_url as string}/v1/${node.id}`)
    const rpcKey = s.json<{ key: string }>(await s.run(['api-key', 'create', '--name', 'wallet', '--scopes', 'nodes:rpc', '--json'])).key
    const curl = await fetch(shown.endpoints.http, {
      method: 'POST',
      headers: { 'X-API-Key': rpcKey, 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"web3_clientVersion","params":[]}',
    })
    expect(await curl.json()).toEqual({ jsonrpc: '2.0', id: 1, result: 'anvil/v1.7.1' })
    const refused = (await (await fetch(`${shown.endpoints.http}/${rpcKey}`, { method: 'POST', body: '{"jsonrpc":"2.0","id":2,"method":"anvil_mine","params":[]}' })).json()) as { error: { code: number } }
    expect(refused.error.code).toBe(-32601)
    const endpoint = new JsonRpcProvider(`${shown.endpoints.http}/${rpcKey}`, undefined, { staticNetwork: true })
    try {
      const recipient = Wallet.createRandom().address
      const tx = await new Wallet(DEV_ACCOUNT_KEY, endpoint).sendTransaction({ to: recipient, value: parseEther('2') })
      expect((await minedReceipt(endpoint, tx.hash)).status).toBe(1)
      expect(await endpoint.getBalance(recipient)).toBe(parseEther('2'))
    } finally {
      endpoint.destroy()
    }
    // What the endpoint served, once the gateway has written its counts (every 5 s): `node usage`.
    await waitFor(async () => Number(((await s.db('rpc_usage').where({ node_id: node.id, method: 'anvil_mine' }).first('requests')) as { requests?: number } | undefined)?.requests ?? 0) > 0, 'usage written', 20_000, 50)
    const usage = s.json<{ totals: { requests: number; errors: number }; methods: Array<{ method: string; requests: number; errors: number }> }>(await s.run(['node', 'usage', '--id', node.id, '--json']))
    expect(usage.methods).toEqual(expect.arrayContaining([expect.objectContaining({ method: 'web3_clientVersion', requests: 1, errors: 0 }), expect.objectContaining({ method: 'anvil_mine', requests: 1, errors: 1 })]))
    expect(usage.totals.requests).toBeGreaterThanOrEqual(4)
    const table = await s.run(['node', 'usage', '--id', node.id, '--window', '7d'])
    expect(table.exitCode).toBe(0)
    expect(table.stdout).toMatch(/METHOD\s+REQUESTS\s+ERRORS\s+P50 MS\s+P99 MS/)
    expect(table.stdout).toMatch(/anvil_mine\s+1\s+1\s/)
    const badWindow = await s.run(['node', 'usage', '--id', node.id, '--window', '30d'])
    expect(badWindow.exitCode).not.toBe(0)
    // On the host itself, the port from .nodeplane/hosts/local-<node>/state/active.json.
    await withAnvil(`${s.dataDir}/hosts/local-${node.id}/state`, async (provider) => {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.7.1')
      const recipient = Wallet.createRandom().address
      const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther('1') })
      expect((await minedReceipt(provider, tx.hash)).status).toBe(1)
      expect(await provider.getBalance(recipient)).toBe(parseEther('1'))
    })
  })
})
