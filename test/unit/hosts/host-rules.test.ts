/** Host states (src/hosts/host-states.ts) as a whole table, and the CLI's capacity and label spelling. */
import { describe, expect, it } from 'vitest'
import { ConflictError, ValidationError } from '../../../src/errors.js'
import { parseCapacity, parseLabels, parseSize } from '../../../src/hosts/capacity.js'
import { HOST_STATES, hostMoveAllowed, nextHostState, type HostAction, type HostState } from '../../../src/hosts/host-states.js'

const EXPECTED: Record<HostAction, Partial<Record<HostState, HostState>>> = {
  cordon: { ready: 'cordoned', unreachable: 'cordoned' },
  uncordon: { cordoned: 'ready', draining: 'ready' },
  drain: { ready: 'draining', cordoned: 'draining', unreachable: 'draining' },
  drained: { draining: 'cordoned' },
  remove: { ready: 'removed', cordoned: 'removed', draining: 'removed', unreachable: 'removed' },
  probe_failed: { ready: 'unreachable' },
  probe_ok: { unreachable: 'ready' },
}

describe('host state table', () => {
  for (const [action, moves] of Object.entries(EXPECTED) as Array<[HostAction, Partial<Record<HostState, HostState>>]>) {
    for (const from of HOST_STATES) {
      const to = moves[from]
      it(`${action} from ${from}: ${to ?? 'refused'}`, () => {
        expect(hostMoveAllowed(from, action)).toBe(to !== undefined)
        if (to) expect(nextHostState(from, action, 'h1')).toBe(to)
        else expect(() => nextHostState(from, action, 'h1')).toThrow(ConflictError)
      })
    }
  }
  it('a removed host never moves again', () => {
    for (const action of Object.keys(EXPECTED) as HostAction[]) expect(hostMoveAllowed('removed', action)).toBe(false)
  })
  it('the refusal says what the move starts from', () => {
    expect(() => nextHostState('removed', 'cordon', 'fra-1')).toThrow(expect.objectContaining({ details: 'cordon applies to a host that is ready or unreachable; host fra-1 is removed' }))
  })
})

describe('capacity and labels', () => {
  it('parses sizes in binary and decimal units', () => {
    expect(parseSize('32GiB', 'm')).toBe(32 * 2 ** 30)
    expect(parseSize('500GB', 'm')).toBe(500e9)
    expect(parseSize('1.5TiB', 'm')).toBe(1.5 * 2 ** 40)
    expect(parseSize('4096', 'm')).toBe(4096)
    for (const bad of ['', 'lots', '-1GiB', '0', '12 parsecs']) expect(() => parseSize(bad, 'm'), bad).toThrow(ValidationError)
  })
  it('parses cpu=N,memory=SIZE,disk=SIZE and names what is missing or unknown', () => {
    expect(parseCapacity('cpu=8,memory=32GiB,disk=500GiB')).toEqual({ cpu: 8, memory_bytes: 32 * 2 ** 30, disk_bytes: 500 * 2 ** 30 })
    expect(() => parseCapacity('cpu=8,memory=32GiB')).toThrow(expect.objectContaining({ details: expect.stringContaining('missing disk') }))
    expect(() => parseCapacity('cpu=8,memory=1GiB,disk=1GiB,gpu=2')).toThrow(expect.objectContaining({ details: expect.stringContaining('unknown gpu') }))
    expect(() => parseCapacity('cpu=2.5,memory=1GiB,disk=1GiB')).toThrow(expect.objectContaining({ details: expect.stringContaining('whole number') }))
    expect(() => parseCapacity('cpu=2,cpu=3,memory=1GiB,disk=1GiB')).toThrow(expect.objectContaining({ details: expect.stringContaining('given twice') }))
  })
  it('parses labels', () => {
    expect(parseLabels('rack=r12, disk=nvme')).toEqual({ rack: 'r12', disk: 'nvme' })
    expect(() => parseLabels('rack')).toThrow(ValidationError)
  })
})
