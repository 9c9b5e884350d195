import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../../src/errors.js'
import { legacyKeysToInputSpecs, type InputSpec } from '../../../src/secrets/input-specs.js'

const declared: InputSpec[] = [{ name: 'moniker', type: 'text', required: true, validation: '^[a-z]{3,20}$', phase: 'pre_provision' }]

describe('legacy keys list -> input specs', () => {
  it('turns each name into a generated secret, after the declared inputs', () => {
    expect(legacyKeysToInputSpecs('devnet', ['validator', 'node_key.json'], declared)).toEqual([
      declared[0],
      { name: 'validator', type: 'secret', required: false, phase: 'pre_provision', source: 'generated', key_type: 'ed25519' },
      { name: 'node_key.json', type: 'secret', required: false, phase: 'pre_provision', source: 'generated', key_type: 'ed25519' },
    ])
  })

  it('uses the key type the chain gives, and leaves no legacy keys alone', () => {
    expect(legacyKeysToInputSpecs('eth', ['signer'], [], 'secp256k1')).toEqual([
      { name: 'signer', type: 'secret', required: false, phase: 'pre_provision', source: 'generated', key_type: 'secp256k1' },
    ])
    expect(legacyKeysToInputSpecs('devnet', [], declared)).toEqual(declared)
  })

  it('refuses repeated names, names already declared and malformed names, all in one error naming the chain', () => {
    let err: unknown
    try {
      legacyKeysToInputSpecs('devnet', ['a', 'a', 'moniker', '../etc/passwd', ''], declared)
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(ConfigError)
    const problems = (err as ConfigError).problems
    expect(problems).toHaveLength(4)
    expect(problems.every((p) => p.startsWith('chain devnet: keys['))).toBe(true)
    expect(problems[0]).toContain('keys[1] "a" is already declared earlier in keys')
    expect(problems[1]).toContain('keys[2] "moniker" is already declared as an input')
    expect(problems[2]).toContain('keys[3]')
  })
})
