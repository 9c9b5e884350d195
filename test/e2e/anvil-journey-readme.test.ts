import { Wallet, parseEther } from 'ethers'
import { describe, expect, it } from 'vitest'
import { DEV_ACCOUNT_KEY, withAnvil } from '../helpers/anvil.js'
import { useJourneyStack } from './chain-journey-stack.js'

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
    // The README reads the port from .nodeplane/hosts/local-<node>/state/active.json.
    await withAnvil(`${s.dataDir}/hosts/local-${node.id}/state`, async (provider) => {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.7.1')
      const recipient = Wallet.createRandom().address
      const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther('1') })
      expect((await tx.wait(1, 15_000))?.status).toBe(1)
      expect(await provider.getBalance(recipient)).toBe(parseEther('1'))
    })
  })
})
