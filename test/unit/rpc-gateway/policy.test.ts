import { describe, expect, it } from 'vitest'
import { rpcPolicySchema } from '../../../src/config/rpc-policy.js'
import { parseBody } from '../../../src/rpc-gateway/json-rpc.js'
import { compilePolicy } from '../../../src/rpc-gateway/policy.js'

describe('rpc method policy', () => {
  const spec = rpcPolicySchema.parse({
    deny: [{ methods: ['admin_*', 'stop'], reason: 'administration is not offered' }],
    node_types: {
      full: { deny: [{ methods: ['trace_*'], reason: 'needs an archive node' }] },
      light: { allow: ['eth_blockNumber', 'net_*'] },
    },
  })

  it('refuses by prefix or exact name with the reason, per node type, and passes the rest', () => {
    const full = compilePolicy(spec, 'demo', 'full')
    expect(full.check('admin_peers')).toBe('method admin_peers is not available: administration is not offered')
    expect(full.check('stop')).toContain('administration')
    expect(full.check('stopped')).toBeUndefined()
    expect(full.check('trace_block')).toContain('needs an archive node')
    expect(full.check('eth_call')).toBeUndefined()
    expect(compilePolicy(spec, 'demo', 'archive').check('trace_block')).toBeUndefined()
  })

  it('an allow-list passes only its methods, after the chain-wide denies', () => {
    const light = compilePolicy(spec, 'demo', 'light')
    expect(light.check('eth_blockNumber')).toBeUndefined()
    expect(light.check('net_version')).toBeUndefined()
    expect(light.check('eth_call')).toBe('method eth_call is not offered by a light node of demo')
    expect(light.check('admin_x')).toContain('administration')
  })

  it('a profile without a policy passes everything; a bad pattern is refused when the profile loads', () => {
    expect(compilePolicy(undefined, 'devnet', 'full').check('admin_anything')).toBeUndefined()
    expect(rpcPolicySchema.safeParse({ deny: [{ methods: ['a*b'], reason: 'x' }] }).success).toBe(false)
    expect(rpcPolicySchema.safeParse({ deny: [{ methods: ['eth_*'] }] }).success).toBe(false)
  })
})

describe('JSON-RPC bodies', () => {
  it('tells a call, a batch and garbage apart', () => {
    expect(parseBody(Buffer.from('{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}'), 10)).toMatchObject({ kind: 'single', call: { id: 3, method: 'eth_chainId' } })
    expect(parseBody(Buffer.from('[{"id":1,"method":"a"},7]'), 10)).toMatchObject({ kind: 'batch', calls: [{ method: 'a' }, { error: { code: -32600 } }] })
    expect(parseBody(Buffer.from('nope'), 10)).toMatchObject({ kind: 'invalid', status: 400, response: { id: null, error: { code: -32700 } } })
    expect(parseBody(Buffer.from('[1,2,3]'), 2)).toMatchObject({ kind: 'invalid', status: 400, response: { error: { code: -32600, message: 'batch too long: 3 calls, at most 2 per request' } } })
    expect(parseBody(Buffer.from('{"id":"x","method":""}'), 2)).toMatchObject({ kind: 'invalid', response: { id: 'x', error: { code: -32600 } } })
  })
})
