import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { CommandError, createExecutor, type Executor } from '../../../src/node-agent/executor.js'
import { loadOrCreateAgentKey } from '../../../src/node-agent/keys.js'
import { seal } from '../../../src/secrets/sealed-box.js'
import { readActiveDeployment, readCommandJournal, releaseBinaryPath, type StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor, isProcessAlive } from '../../../src/node-agent/supervisor.js'
import { capturingLogger, fileUrl, fixture, killAll, removeStateDir, sha256Of, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'
import { waitFor } from '../../helpers/ports.js'

const sleeper = { version: '1.0.0', url: fileUrl(fixture('sleeper.mjs')), sha256: sha256Of(fixture('sleeper.mjs')) }
const configure = (extra: Record<string, unknown> = {}) => ({
  binary_name: 'chain',
  artifact: sleeper,
  files: [{ path: 'config/chain.toml', content: 'port = 1\n', mode: 0o640 }],
  config_version: 'v1',
  run: { runtime: 'node', args: ['{config_dir}/chain.toml'] },
  ...extra,
})

function recorder(): { report: { progress: (phase: string, message: string) => void }; calls: string[] } {
  const calls: string[] = []
  return { calls, report: { progress: (phase, message) => calls.push(`${phase}: ${message}`) } }
}

describe('command executor', () => {
  let dir: StateDir | undefined
  let supervisor: ChainSupervisor | undefined
  let store: string | undefined
  const pids = new Set<number>()

  afterEach(async () => {
    await supervisor?.close()
    supervisor = undefined
    killAll(pids)
    pids.clear()
    removeStateDir(dir)
    dir = undefined
    if (store) fs.rmSync(store, { recursive: true, force: true })
    store = undefined
  })

  function node(logger = silentLogger): { dir: StateDir; executor: Executor } {
    const stateDir = tempStateDir()
    dir = stateDir
    supervisor = new ChainSupervisor({ stateDir, logger, settleMs: 100, stopGraceMs: 2_000 })
    return { dir: stateDir, executor: createExecutor({ stateDir, supervisor, logger: silentLogger }) }
  }

  it('rejects unknown types and invalid payloads with a message naming the fields', async () => {
    const { dir, executor } = node()
    const { report } = recorder()
    await expect(executor.execute({ id: 'c-1', type: 'reboot', payload: {} }, report)).rejects.toThrow(new CommandError('unknown command type "reboot"'))
    await expect(executor.execute({ id: 'c-2', type: 'configure', payload: { binary_name: 'chain', artifact: { ...sleeper, sha256: 'ABC' } } }, report)).rejects.toThrow(
      'invalid configure payload: artifact.sha256: must be a lowercase hex SHA-256; run: Required',
    )
    await expect(executor.execute({ id: 'c-3', type: 'start', payload: { now: true } }, report)).rejects.toThrow(/invalid start payload: \(payload\): Unrecognized key/)
    await expect(executor.execute({ id: '../c-4', type: 'start', payload: {} }, report)).rejects.toThrow(/command id "\.\.\/c-4" must be/)
    // Nothing ran, so nothing was journaled.
    expect(fs.readdirSync(dir.commandsDir)).toEqual([])
  })

  it('configures: installs the artifact, writes configs with their modes and active.json, and does not start', async () => {
    const { dir, executor } = node()
    const { report, calls } = recorder()
    expect(await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)).toEqual({ binary_version: '1.0.0', config_version: 'v1' })
    expect(calls).toContain('configure: installed 1.0.0')
    const binary = releaseBinaryPath(dir, 'chain', '1.0.0')
    expect(sha256Of(binary)).toBe(sleeper.sha256)
    expect(fs.statSync(binary).mode & 0o777).toBe(0o755)
    expect(fs.readFileSync(path.join(dir.configDir, 'chain.toml'), 'utf8')).toBe('port = 1\n')
    expect(fs.statSync(path.join(dir.configDir, 'chain.toml')).mode & 0o777).toBe(0o640)
    expect(readActiveDeployment(dir)).toMatchObject({ binary_name: 'chain', version: '1.0.0', config_version: 'v1', crash_loop: { max_restarts: 5, window_seconds: 300 } })
    expect(supervisor?.status().process_state).toBe('stopped')
    expect(fs.readdirSync(dir.downloadsDir)).toEqual([])

    // A second configure (new id) replaces the config set and skips the installed artifact.
    const second = recorder()
    await executor.execute({ id: 'configure-2', type: 'configure', payload: configure({ files: [{ path: 'config/other.toml', content: 'x' }] }) }, second.report)
    expect(second.calls).toContain('configure: 1.0.0 already installed')
    expect(fs.readdirSync(dir.configDir)).toEqual(['other.toml'])
  })

  it('refuses config files outside config/ and artifacts whose checksum does not match', async () => {
    const { dir, executor } = node()
    const { report } = recorder()
    await expect(executor.execute({ id: 'c-1', type: 'configure', payload: configure({ files: [{ path: 'keys/evil', content: 'x' }] }) }, report)).rejects.toThrow(
      'config file path "keys/evil" must be under config/ (e.g. config/node.json)',
    )
    await expect(executor.execute({ id: 'c-2', type: 'configure', payload: configure({ artifact: { ...sleeper, sha256: '0'.repeat(64) } }) }, report)).rejects.toThrow(
      /artifact checksum mismatch/,
    )
    expect(fs.existsSync(releaseBinaryPath(dir, 'chain', '1.0.0'))).toBe(false)
    expect(readActiveDeployment(dir)).toBeUndefined()
    expect(fs.readdirSync(dir.downloadsDir)).toEqual([])
  })

  it('starts, stops and restarts through the supervisor; start when running is a no-op', async () => {
    const { executor } = node()
    const { report } = recorder()
    await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)
    const started = (await executor.execute({ id: 'start-1', type: 'start', payload: {} }, report)) as { process_state: string; pid: number }
    expect(started).toMatchObject({ process_state: 'running', version: '1.0.0' })
    pids.add(started.pid)
    expect(await executor.execute({ id: 'start-2', type: 'start', payload: {} }, report)).toEqual(started)
    const restarted = (await executor.execute({ id: 'restart-1', type: 'restart', payload: {} }, report)) as { pid: number }
    pids.add(restarted.pid)
    expect(restarted.pid).not.toBe(started.pid)
    expect(isProcessAlive(started.pid)).toBe(false)
    expect(await executor.execute({ id: 'stop-1', type: 'stop', payload: {} }, report)).toEqual({ process_state: 'stopped', pid: null, version: '1.0.0' })
    expect(isProcessAlive(restarted.pid)).toBe(false)
  })

  it('runs a command id once: a repeat returns the recorded result, or rethrows the recorded error', async () => {
    const { dir, executor } = node()
    const { report } = recorder()
    store = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-store-'))
    const key = seal(crypto.randomBytes(32), loadOrCreateAgentKey(dir).publicKey)
    const backup = { id: 'backup-1', type: 'backup', payload: { backup_id: 'b-1', store_url: fileUrl(store), key } }

    // Concurrent duplicates share one run.
    const [first, concurrent] = await Promise.all([executor.execute(backup, report), executor.execute(backup, report)])
    expect(concurrent).toEqual(first)
    fs.rmSync(path.join(store, 'b-1'), { recursive: true })
    expect(await executor.execute(backup, report)).toEqual(first)
    expect(fs.existsSync(path.join(store, 'b-1'))).toBe(false)
    expect(readCommandJournal(dir, 'backup-1')).toMatchObject({ status: 'completed', result: first })

    // A fresh executor (an agent restart) still knows the command.
    const restarted = createExecutor({ stateDir: dir, supervisor: supervisor!, logger: silentLogger })
    expect(await restarted.execute(backup, report)).toEqual(first)

    // start before configure fails; once configured, the same id still reports that failure.
    const start = { id: 'start-1', type: 'start', payload: {} }
    await expect(executor.execute(start, report)).rejects.toThrow(/not configured/)
    await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)
    const again = await executor.execute(start, report).catch((err: unknown) => err)
    expect(again).toBeInstanceOf(CommandError)
    expect((again as Error).message).toMatch(/not configured/)
    expect(supervisor?.status().process_state).toBe('stopped')

    await expect(executor.execute({ ...backup, payload: { backup_id: 'b-2', store_url: fileUrl(store), key } }, report)).rejects.toThrow(
      'command id backup-1 was already used for a different command',
    )
  })

  it('a backup with stop_chain stops the chain first and says so; a chain that must be killed gives no backup', async () => {
    const { logger, lines } = capturingLogger()
    const { dir, executor } = node(logger)
    const { report, calls } = recorder()
    store = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-store-'))
    const key = seal(crypto.randomBytes(32), loadOrCreateAgentKey(dir).publicKey)
    await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)
    const started = (await executor.execute({ id: 'start-1', type: 'start', payload: {} }, report)) as { pid: number }
    pids.add(started.pid)
    const taken = await executor.execute({ id: 'backup-1', type: 'backup', payload: { backup_id: 'b-1', store_url: fileUrl(store), key, stop_chain: true } }, report)
    expect(taken).toMatchObject({ chain_stopped: true, file_count: expect.any(Number) })
    expect(isProcessAlive(started.pid)).toBe(false)
    expect(supervisor?.status().process_state).toBe('stopped')
    expect(calls).toContain('backup: stopping the chain for its last state')
    expect(fs.existsSync(path.join(store, 'b-1', 'manifest.json'))).toBe(true)

    const stubborn = { version: '2.0.0', url: fileUrl(fixture('stubborn.mjs')), sha256: sha256Of(fixture('stubborn.mjs')) }
    await executor.execute({ id: 'configure-2', type: 'configure', payload: configure({ artifact: stubborn }) }, report)
    const again = (await executor.execute({ id: 'start-2', type: 'start', payload: {} }, report)) as { pid: number }
    pids.add(again.pid)
    // Its SIGTERM handler is in place once it says so.
    await waitFor(async () => lines.some((l) => l.msg === 'stubborn ready'), 'the stubborn chain to be ready')
    await expect(executor.execute({ id: 'backup-2', type: 'backup', payload: { backup_id: 'b-2', store_url: fileUrl(store), key, stop_chain: true } }, report)).rejects.toThrow(
      /was killed: its last state may be partial, so no backup was taken/,
    )
    expect(isProcessAlive(again.pid)).toBe(false)
    expect(fs.existsSync(path.join(store, 'b-2'))).toBe(false)
  })

  it('reruns an interrupted idempotent command', async () => {
    const { dir, executor } = node()
    const { report } = recorder()
    await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)
    const journal = readCommandJournal(dir, 'configure-1')!
    // As if the agent had been killed mid-way: the journal still says running.
    fs.writeFileSync(path.join(dir.commandsDir, 'configure-1.json'), JSON.stringify({ ...journal, status: 'running', result: undefined }))
    fs.rmSync(path.join(dir.configDir, 'chain.toml'))
    expect(await executor.execute({ id: 'configure-1', type: 'configure', payload: configure() }, report)).toEqual({ binary_version: '1.0.0', config_version: 'v1' })
    expect(fs.readFileSync(path.join(dir.configDir, 'chain.toml'), 'utf8')).toBe('port = 1\n')
  })
})
