import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { hostsEnv } from '../../../src/config/env.js'
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

describe('the host fleet settings of the ssh provider', () => {
  const parse = (env: Record<string, string>) => z.object(hostsEnv).safeParse(env)
  const problems = (env: Record<string, string>) => {
    const result = parse(env)
    return result.success ? [] : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`)
  }

  it('defaults: the built-in instance types, 5 minutes of waiting for room, ports 10000-19999, auto supervision, unreachable after 3 failed probes', () => {
    const result = parse({})
    expect(result.success && result.data).toMatchObject({
      HOSTS_INSTANCE_TYPES: DEFAULT_INSTANCE_TYPES,
      HOSTS_PLACEMENT_WAIT: 300_000,
      HOSTS_PLACEMENT_RETRY_INTERVAL: 15_000,
      HOSTS_RPC_PORTS: { first: 10_000, last: 19_999 },
      HOSTS_AGENT_SUPERVISOR: 'auto',
      HOSTS_PROBE_FAILURES: 3,
    })
    expect(parse({ HOSTS_PROBE_FAILURES: '1' }).data?.HOSTS_PROBE_FAILURES).toBe(1)
  })

  it('refuses what it cannot use, naming the variable', () => {
    expect(problems({ HOSTS_INSTANCE_TYPES: 'big:cpu=2' })).toEqual([expect.stringMatching(/^HOSTS_INSTANCE_TYPES: big: missing memory, disk/)])
    expect(problems({ HOSTS_PLACEMENT_WAIT: '20m' })).toEqual([expect.stringMatching(/^HOSTS_PLACEMENT_WAIT: must be at most 14m/)])
    expect(problems({ HOSTS_RPC_PORTS: '20000-10000' })).toEqual([expect.stringMatching(/^HOSTS_RPC_PORTS: .*not a port range/)])
    expect(problems({ HOSTS_RPC_PORTS: '80-90' })).toEqual([expect.stringMatching(/^HOSTS_RPC_PORTS: /)])
    expect(problems({ HOSTS_AGENT_SUPERVISOR: 'runit' })).toEqual([expect.stringMatching(/^HOSTS_AGENT_SUPERVISOR: /)])
    for (const bad of ['0', '-1', '2.5', 'three', '101']) expect(problems({ HOSTS_PROBE_FAILURES: bad }), bad).toEqual([expect.stringMatching(/^HOSTS_PROBE_FAILURES: /)])
  })
})
