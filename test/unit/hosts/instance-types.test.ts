import { describe, expect, it } from 'vitest'
import { DEFAULT_INSTANCE_TYPES, parseInstanceTypes } from '../../../src/hosts/instance-types.js'

describe('HOSTS_INSTANCE_TYPES', () => {
  it('adds the operator’s types to the built-in ones, replacing a built-in given again', () => {
    const types = parseInstanceTypes('eth.full:cpu=4,memory=16GiB,disk=2TiB; ssh.small:cpu=2,memory=4GiB,disk=100GiB')
    expect(types['eth.full']).toEqual({ cpu: 4, memory_bytes: 16 * 2 ** 30, disk_bytes: 2 * 2 ** 40 })
    expect(types['ssh.small']).toEqual({ cpu: 2, memory_bytes: 4 * 2 ** 30, disk_bytes: 100 * 2 ** 30 })
    expect(types['ssh.large']).toEqual(DEFAULT_INSTANCE_TYPES['ssh.large'])
    expect(parseInstanceTypes(undefined)).toEqual(DEFAULT_INSTANCE_TYPES)
  })

  it('names the entry at fault', () => {
    expect(() => parseInstanceTypes('cpu=4,memory=16GiB,disk=2TiB')).toThrow(/is not name:cpu=N/)
    expect(() => parseInstanceTypes('big:cpu=4,memory=16GiB')).toThrow(/big: missing disk/)
    expect(() => parseInstanceTypes('big:cpu=1.5,memory=16GiB,disk=1TiB')).toThrow(/big: cpu must be a whole number/)
    expect(() => parseInstanceTypes('big:cpu=2,memory=lots,disk=1TiB')).toThrow(/big: .*"lots" is not a size/)
  })
})
