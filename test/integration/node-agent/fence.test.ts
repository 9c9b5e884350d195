/**
 * The agent's fence (src/node-agent/fence.ts) with a real supervisor and chain process and a
 * clock the test moves: no contact for the fence timeout stops the chain (SIGTERM a grace before
 * it) and refuses starts; a silence shorter than that (a blip) changes nothing; contact again
 * starts the chain that was meant to run. The agents' side over the network is in fencing.test.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { Fence, fenceFile, fenceStopGraceMs } from '../../../src/node-agent/fence.js'
import type { StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor, isProcessAlive } from '../../../src/node-agent/supervisor.js'
import { waitFor } from '../../helpers/ports.js'
import { activateFixture, capturingLogger, killAll, removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

const TIMEOUT_MS = 60_000

describe('the fence', () => {
  let dir: StateDir | undefined
  const pids = new Set<number>()
  const cleanups: Array<() => Promise<void> | void> = []

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup()
    killAll(pids)
    pids.clear()
    removeStateDir(dir)
    dir = undefined
  })

  async function running(options: { fenced?: boolean } = {}) {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const supervisor = new ChainSupervisor({ stateDir: dir, logger: silentLogger, settleMs: 100, stopGraceMs: 2_000, ...options })
    let now = 0
    const fenced: number[] = []
    const logs = capturingLogger()
    const fence = new Fence({ timeoutMs: TIMEOUT_MS, supervisor, stateDir: dir, logger: logs.logger, now: () => now, onFenced: () => fenced.push(now) })
    cleanups.push(() => fence.stop(), () => supervisor.close())
    fence.start()
    return { supervisor, fence, fenced, logs, advance: (ms: number) => (now += ms), at: () => now, stateDir: dir }
  }

  it('a silence shorter than the timeout changes nothing; at the timeout less the grace the chain is stopped and no start gets through', async () => {
    const f = await running()
    f.fence.contact(f.at())
    await f.supervisor.start()
    const pid = f.supervisor.status().pid as number
    pids.add(pid)

    // A blip: silent for all but a moment of the stop's head start, then a contact.
    f.advance(TIMEOUT_MS - fenceStopGraceMs(TIMEOUT_MS) - 1)
    await new Promise((resolve) => setTimeout(resolve, 1_200))
    expect(isProcessAlive(pid)).toBe(true)
    f.fence.contact(f.at())
    f.advance(TIMEOUT_MS - fenceStopGraceMs(TIMEOUT_MS) - 1)
    await new Promise((resolve) => setTimeout(resolve, 1_200))
    expect(isProcessAlive(pid)).toBe(true)
    expect(f.fenced).toEqual([])

    // Silent long enough: stopped, recorded, the stream dropped, and starts refused.
    f.advance(1)
    await waitFor(async () => !isProcessAlive(pid), 'the chain stopped', 10_000, 20)
    await waitFor(async () => f.fenced.length === 1, 'the stream dropped', 10_000, 20)
    expect(f.fence.fenced).toBe(true)
    expect(JSON.parse(fs.readFileSync(fenceFile(f.stateDir), 'utf8'))).toMatchObject({ stopped_pid: pid, timeout_ms: TIMEOUT_MS })
    await expect(f.supervisor.start()).rejects.toThrow(/the chain is fenced/)
    expect(f.supervisor.status().process_state).toBe('stopped')
    // chain.wanted is kept: the chain is meant to run once the agent is reachable again.
    expect(fs.existsSync(path.join(f.stateDir.root, 'chain.wanted'))).toBe(true)
    expect(f.logs.lines.some((l) => String(l.msg).startsWith('fence: stopping the chain process'))).toBe(true)
  })

  it('contact again lifts the fence and starts the chain that was meant to run; one that was stopped stays stopped', async () => {
    const f = await running()
    f.fence.contact(f.at())
    await f.supervisor.start()
    pids.add(f.supervisor.status().pid as number)
    f.advance(TIMEOUT_MS)
    await waitFor(async () => f.fence.fenced && fs.existsSync(fenceFile(f.stateDir)), 'fenced', 10_000, 20)

    f.fence.contact(f.at())
    const pid = await waitFor(async () => f.supervisor.status().pid, 'the chain started again', 10_000, 20)
    pids.add(pid)
    expect(f.fence.fenced).toBe(false)
    expect(fs.existsSync(fenceFile(f.stateDir))).toBe(false)

    // An explicit stop, then a fence and a contact: nothing starts.
    await f.supervisor.stop()
    f.advance(TIMEOUT_MS)
    await waitFor(async () => f.fence.fenced, 'fenced again', 10_000, 20)
    f.fence.contact(f.at())
    await waitFor(async () => !f.fence.fenced, 'lifted', 10_000, 20)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(f.supervisor.status()).toMatchObject({ process_state: 'stopped' })
  })

  it('an agent starting fenced starts a chain left wanted only at its first contact', async () => {
    const first = await running()
    first.fence.contact(first.at())
    await first.supervisor.start()
    await first.fence.stop()
    await first.supervisor.close()

    // The next agent on the same directory: fenced until a gateway acknowledges it.
    const supervisor = new ChainSupervisor({ stateDir: first.stateDir, logger: silentLogger, settleMs: 100, stopGraceMs: 2_000, fenced: true })
    const fence = new Fence({ timeoutMs: TIMEOUT_MS, supervisor, stateDir: first.stateDir, logger: silentLogger, now: () => 0 })
    cleanups.push(() => fence.stop(), () => supervisor.close())
    fence.start()
    await expect(supervisor.resumeIfWanted()).rejects.toThrow(/the chain is fenced/)
    expect(supervisor.status().pid).toBeUndefined()
    fence.contact(0)
    const pid = await waitFor(async () => supervisor.status().pid, 'the chain resumed at the first contact', 10_000, 20)
    pids.add(pid)
  })
})
