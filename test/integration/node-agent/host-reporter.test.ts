import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { probeSpec } from '../../../src/agent-gateway/protocol.js'
import { HostReporter } from '../../../src/node-agent/host.js'
import type { StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor } from '../../../src/node-agent/supervisor.js'
import { activateFixture, killAll, manualClock, removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

// The probe answers once the chain stand-in's state dir holds a `ready` file (a chain opening its RPC port).
const readyProbe = probeSpec.parse({
  type: 'command',
  command: [process.execPath, '-e', `process.exit(require('fs').existsSync('ready') ? 0 : 1)`],
  startup_grace_ms: 30_000,
})

describe('agent heartbeat host report: start-up grace', () => {
  let dir: StateDir | undefined
  let supervisor: ChainSupervisor | undefined
  const pids = new Set<number>()

  afterEach(async () => {
    await supervisor?.close()
    supervisor = undefined
    killAll(pids)
    pids.clear()
    removeStateDir(dir)
    dir = undefined
  })

  async function started(probe = readyProbe): Promise<{ reporter: HostReporter; clock: ReturnType<typeof manualClock>; stateDir: StateDir; chain: ChainSupervisor }> {
    const stateDir = tempStateDir()
    dir = stateDir
    activateFixture(stateDir, 'sleeper.mjs', { probe })
    const chain = new ChainSupervisor({ stateDir, logger: silentLogger, settleMs: 100, stopGraceMs: 2_000 })
    supervisor = chain
    await chain.start()
    const pid = chain.status().pid
    if (pid !== undefined) pids.add(pid)
    const clock = manualClock()
    return { reporter: new HostReporter(stateDir, chain, () => clock.now().getTime()), clock, stateDir, chain }
  }

  const ready = (stateDir: StateDir) => fs.writeFileSync(path.join(stateDir.root, 'ready'), '')
  const notReady = (stateDir: StateDir) => fs.rmSync(path.join(stateDir.root, 'ready'), { force: true })

  it('reports a process that has not answered its probe as starting until the grace ends, then as running', async () => {
    const { reporter, clock } = await started()
    expect(await reporter.snapshot()).toMatchObject({ process_state: 'starting', sync_status: 'unknown', binary_version: '1.0.0' })
    clock.advance(29_000)
    expect((await reporter.snapshot()).process_state).toBe('starting')
    // Past the grace a silent process is judged: `running` with a failing probe.
    clock.advance(1_000)
    expect((await reporter.snapshot()).process_state).toBe('running')
  })

  it('reports running from the first answer on, and a later failure still as running', async () => {
    const { reporter, stateDir } = await started()
    expect((await reporter.snapshot()).process_state).toBe('starting')
    ready(stateDir)
    expect((await reporter.snapshot()).process_state).toBe('running')
    notReady(stateDir)
    expect((await reporter.snapshot()).process_state).toBe('running')
  })

  it('a process replaced while it was being probed is reported starting, without the old process\'s answer', async () => {
    // A probe that takes a second: time enough for a restart to replace the process under it.
    const slowProbe = probeSpec.parse({ ...readyProbe, command: [process.execPath, '-e', `setTimeout(() => process.exit(require('fs').existsSync('ready') ? 0 : 1), 1000)`] })
    const { reporter, stateDir, chain } = await started(slowProbe)
    ready(stateDir)
    expect((await reporter.snapshot()).process_state).toBe('running')
    notReady(stateDir)
    const probing = reporter.snapshot()
    await chain.restart()
    const pid = chain.status().pid
    if (pid !== undefined) pids.add(pid)
    expect(await probing).toMatchObject({ process_state: 'starting', sync_status: 'unknown', metrics: {} })
    // The new process gets its own grace: still starting until it answers.
    expect((await reporter.snapshot()).process_state).toBe('starting')
    ready(stateDir)
    expect((await reporter.snapshot()).process_state).toBe('running')
  })

  it('begins a new grace for each new process, and reports a stopped one as stopped', async () => {
    const { reporter, clock, stateDir, chain } = await started()
    ready(stateDir)
    expect((await reporter.snapshot()).process_state).toBe('running')
    await chain.stop()
    expect(await reporter.snapshot()).toMatchObject({ process_state: 'stopped', sync_status: 'unknown', metrics: {} })
    notReady(stateDir)
    clock.advance(60_000)
    await chain.start()
    const pid = chain.status().pid
    if (pid !== undefined) pids.add(pid)
    expect((await reporter.snapshot()).process_state).toBe('starting')
  })
})
