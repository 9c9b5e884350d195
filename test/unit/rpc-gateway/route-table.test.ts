import { describe, expect, it } from 'vitest'
import { staticChainSource } from '../../../src/config/chain-source.js'
import type { ChainCatalogue } from '../../../src/config/chains.js'
import type { Queryable } from '../../../src/db/knex.js'
import { RouteTable } from '../../../src/rpc-gateway/route-table.js'

const NODE = '0190c3a2-7c1e-7cc0-9c6e-2f6f0d5c1a11'

/** A stand-in for the two reads readRoute makes (nodes joined with subscriptions; the latest configure), answering what `state.port` says at the moment the read resolves. */
function fakeDb(state: { port: number; reads: number; gate?: Promise<void> }): Queryable {
  const builder = (table: string) => {
    const chain = {
      join: () => chain,
      where: () => chain,
      orderBy: () => chain,
      first: async () => {
        if (table === 'nodes as n') {
          state.reads++
          await state.gate
          return { id: NODE, state: 'healthy', chain_profile_id: 'devnet', node_type: 'full', host_id: 'local-x', host_ip: '127.0.0.1', provider: 'local', user_id: 'u' }
        }
        return { payload: JSON.stringify({ rpc_port: state.port }) }
      },
    }
    return chain
  }
  return builder as unknown as Queryable
}

describe('the rpc-gateway route table', () => {
  const chains = staticChainSource({ profiles: new Map() } as unknown as ChainCatalogue)

  it('keeps a route for the TTL, shares one read between concurrent requests, and reads again once invalidated', async () => {
    let clock = 0
    const state = { port: 1001, reads: 0 }
    const table = new RouteTable({ db: fakeDb(state), chains, ttlMs: 1_000, localHostsDir: '/nowhere', now: () => clock })
    const [a, b] = await Promise.all([table.get(NODE), table.get(NODE.toUpperCase())])
    expect(a?.upstream?.url).toBe('http://127.0.0.1:1001/')
    expect(b).toBe(a)
    expect(state.reads).toBe(1)
    state.port = 1002
    expect((await table.get(NODE))?.upstream?.url).toBe('http://127.0.0.1:1001/')
    table.invalidate(NODE)
    expect((await table.get(NODE))?.upstream?.url).toBe('http://127.0.0.1:1002/')
    state.port = 1003
    clock += 1_001
    expect((await table.get(NODE))?.upstream?.url).toBe('http://127.0.0.1:1003/')
    expect(await table.get('not-a-uuid')).toBeUndefined()
  })

  it('does not keep a read that was in flight when the node changed', async () => {
    let open: () => void = () => undefined
    const state: { port: number; reads: number; gate?: Promise<void> } = { port: 2001, reads: 0, gate: new Promise<void>((resolve) => (open = resolve)) }
    const table = new RouteTable({ db: fakeDb(state), chains, ttlMs: 60_000, localHostsDir: '/nowhere' })
    const early = table.get(NODE)
    table.invalidate(NODE)
    state.port = 2002
    open()
    await early
    delete state.gate
    expect((await table.get(NODE))?.upstream?.url).toBe('http://127.0.0.1:2002/')
    expect(state.reads).toBe(2)
  })
})
