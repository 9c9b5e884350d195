import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import { afterEach, describe, expect, it } from 'vitest'
import { ChainSupervisor, isProcessAlive, type SupervisorOptions } from '../../../src/node-agent/supervisor.js'
import type { StateDir } from '../../../src/node-agent/state-dir.js'
import { waitFor } from '../../helpers/ports.js'
import { activateFixture, capturingLogger, fixture, killAll, manualClock, removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

describe('chain supervisor', () => {
  let dir: StateDir | undefined
  const supervisors: ChainSupervisor[] = []
  const pids = new Set<number>()
  const agents: ChildProcess[] = []

  afterEach(async () => {
    await Promise.all(supervisors.splice(0).map((s) => s.close()))
    for (const agent of agents.splice(0)) agent.kill('SIGKILL')
    killAll(pids)
    pids.clear()
    removeStateDir(dir)
    dir = undefined
  })

  function supervisor(options: Partial<SupervisorOptions> = {}): ChainSupervisor {
    dir ??= tempStateDir()
    const s = new ChainSupervisor({ stateDir: dir, logger: silentLogger, settleMs: 150, stopGraceMs: 2_000, restartBackoff: { initialMs: 10, maxMs: 50 }, ...options })
    supervisors.push(s)
    return s
  }

  function runningPid(s: ChainSupervisor): number {
    const pid = s.status().pid
    if (pid === undefined) throw new Error(`not running: ${JSON.stringify(s.status())}`)
    pids.add(pid)
    return pid
  }

  it('is unconfigured without an active deployment and refuses to start', async () => {
    const s = supervisor()
    expect(s.status()).toMatchObject({ process_state: 'unconfigured', restarts_in_window: 0 })
    await expect(s.start()).rejects.toThrow(/not configured: no active deployment/)
  })

  it('after an agent restart, starts the chain again only if it was running and not explicitly stopped', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const first = supervisor()
    await first.start()
    runningPid(first)
    // Agent shutdown (close) stops the chain but remembers that it should run.
    await first.close()
    const second = supervisor()
    expect(await second.resumeIfWanted()).toBe(true)
    runningPid(second)
    expect(second.status().process_state).toBe('running')
    // An explicit stop is remembered too.
    await second.stop()
    await second.close()
    const third = supervisor()
    expect(await third.resumeIfWanted()).toBe(false)
    expect(third.status().process_state).toBe('stopped')
  })

  it('starts the active release with placeholders replaced, logs its output, and stops it with SIGTERM', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs', { run: { args: ['--data-dir', '{data_dir}', '--keys={keys_dir}'], env: { SLEEPER_NOTE: 'config at {config_dir}' } } })
    const { logger, lines } = capturingLogger()
    const s = supervisor({ logger })
    expect(s.status().process_state).toBe('stopped')

    await s.start()
    const pid = runningPid(s)
    expect(isProcessAlive(pid)).toBe(true)
    expect(s.status()).toMatchObject({ process_state: 'running', pid, version: '1.0.0', binary_name: 'chain' })
    const ready = await waitFor(async () => lines.find((l) => String(l.msg).startsWith('sleeper ready')), 'the sleeper output in the log')
    expect(ready).toMatchObject({ stream: 'stdout', chain_pid: pid })
    expect(ready.msg).toContain(JSON.stringify(['--data-dir', dir.dataDir, `--keys=${dir.keysDir}`]))
    expect(ready.msg).toContain(`note=config at ${dir.configDir}`)

    await s.start() // already running: nothing happens
    expect(s.status().pid).toBe(pid)

    await s.stop()
    expect(isProcessAlive(pid)).toBe(false)
    expect(s.status()).toMatchObject({ process_state: 'stopped', last_exit: { code: 0, signal: null } })
    expect(fs.existsSync(dir.pidFile)).toBe(false)
  })

  it('runs a native executable directly', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs', { run: { runtime: 'native', args: ['native'] } })
    const s = supervisor()
    await s.start()
    const pid = runningPid(s)
    expect(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8')).toContain('releases/1.0.0/chain')
    await s.stop()
    expect(isProcessAlive(pid)).toBe(false)
  })

  it('kills a process that ignores SIGTERM once the grace period is over', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'stubborn.mjs')
    const { logger, lines } = capturingLogger()
    const s = supervisor({ stopGraceMs: 300, logger })
    await s.start()
    const pid = runningPid(s)
    // Its SIGTERM handler is in place once it says so.
    await waitFor(async () => lines.some((l) => l.msg === 'stubborn ready'), 'the stubborn process to be ready')
    const began = Date.now()
    await s.stop()
    expect(Date.now() - began).toBeGreaterThanOrEqual(290)
    expect(isProcessAlive(pid)).toBe(false)
    expect(s.status().last_exit).toMatchObject({ signal: 'SIGKILL' })
  })

  it('fails start when the process exits during the settle period, with its last output, and does not restart it', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'crasher.mjs')
    const s = supervisor({ settleMs: 2_000 })
    await expect(s.start()).rejects.toThrow(/exited during start \(exit code 1\); last output: crasher: boom/)
    expect(s.status()).toMatchObject({ process_state: 'stopped', restarts_in_window: 0, last_exit: { code: 1 } })
  })

  it('restarts a process that dies unexpectedly, and restart() replaces a running one', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const s = supervisor()
    await s.start()
    const first = runningPid(s)
    process.kill(first, 'SIGKILL')
    const second = await waitFor(async () => {
      const pid = s.status().pid
      return pid !== undefined && pid !== first ? pid : undefined
    }, 'the restarted process')
    pids.add(second)
    expect(s.status()).toMatchObject({ process_state: 'running', restarts_in_window: 1, last_exit: { signal: 'SIGKILL' } })

    await s.restart()
    const third = runningPid(s)
    expect(third).not.toBe(second)
    expect(isProcessAlive(second)).toBe(false)
    expect(s.status()).toMatchObject({ process_state: 'running', restarts_in_window: 0 })
  })

  it('stops restarting after max_restarts within the window (crash_loop) until an explicit start', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs', { crashLoop: { max_restarts: 2, window_seconds: 60 } })
    const s = supervisor()
    await s.start()
    let pid = runningPid(s)
    for (let restart = 1; restart <= 2; restart++) {
      process.kill(pid, 'SIGKILL')
      const previous = pid
      pid = await waitFor(async () => {
        const p = s.status().pid
        return p !== undefined && p !== previous ? p : undefined
      }, `restart ${restart}`)
      pids.add(pid)
      expect(s.status().restarts_in_window).toBe(restart)
    }
    process.kill(pid, 'SIGKILL')
    await waitFor(async () => s.status().process_state === 'crash_loop', 'the crash loop')
    expect(s.status()).toMatchObject({ process_state: 'crash_loop', restarts_in_window: 2 })
    expect(s.status().pid).toBeUndefined()

    await s.start()
    runningPid(s)
    expect(s.status()).toMatchObject({ process_state: 'running', restarts_in_window: 0 })
  })

  it('counts only the restarts inside the window (injected clock)', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs', { crashLoop: { max_restarts: 2, window_seconds: 60 } })
    const clock = manualClock()
    const s = supervisor({ clock: clock.now })
    await s.start()
    let pid = runningPid(s)
    for (let crash = 1; crash <= 4; crash++) {
      clock.advance(61_000)
      process.kill(pid, 'SIGKILL')
      const previous = pid
      pid = await waitFor(async () => {
        const p = s.status().pid
        return p !== undefined && p !== previous ? p : undefined
      }, `restart after crash ${crash}`)
      pids.add(pid)
      expect(s.status()).toMatchObject({ process_state: 'running', restarts_in_window: 1 })
    }
    clock.advance(61_000)
    expect(s.status().restarts_in_window).toBe(0)
  })

  it('leaves no process behind when closed', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const s = supervisor()
    await s.start()
    const pid = runningPid(s)
    await s.close()
    expect(isProcessAlive(pid)).toBe(false)
    await expect(s.start()).rejects.toThrow(/closed/)
  })

  function agentProcess(stateDir: StateDir, how: 'exit' | 'hang'): { child: ChildProcess; chainPid: Promise<number> } {
    const child = spawn(process.execPath, ['--import', 'tsx', fixture('agent-process.ts'), 'supervise', stateDir.root, how], { stdio: ['ignore', 'pipe', 'inherit'] })
    agents.push(child)
    const chainPid = new Promise<number>((resolve, reject) => {
      let out = ''
      child.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8')
        const line = out.split('\n').find((l) => l.startsWith('{'))
        if (line) resolve((JSON.parse(line) as { pid: number }).pid)
      })
      child.once('exit', (code) => reject(new Error(`the agent process exited (${code}) before reporting its chain pid`)))
    })
    return { child, chainPid }
  }

  it('stops the chain process when the agent process exits without closing', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const { chainPid } = agentProcess(dir, 'exit')
    const pid = await chainPid
    pids.add(pid)
    await waitFor(async () => !isProcessAlive(pid), 'the chain process to end with its agent')
  })

  it('stops a chain process orphaned by a killed agent before starting a new one', async () => {
    dir = tempStateDir()
    activateFixture(dir, 'sleeper.mjs')
    const { child, chainPid } = agentProcess(dir, 'hang')
    const orphan = await chainPid
    pids.add(orphan)
    child.kill('SIGKILL')
    await new Promise((resolve) => child.once('exit', resolve))
    expect(isProcessAlive(orphan)).toBe(true)

    const s = supervisor()
    await s.start()
    const pid = runningPid(s)
    expect(pid).not.toBe(orphan)
    expect(isProcessAlive(orphan)).toBe(false)
  })
})
