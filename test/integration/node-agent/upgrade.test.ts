import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { UpgradeAction, UpgradeResult } from '../../../src/agent-gateway/protocol.js'
import { CommandError, createExecutor, type AgentCommand, type Executor } from '../../../src/node-agent/executor.js'
import { readActiveDeployment, readCommandJournal, type StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor, isProcessAlive } from '../../../src/node-agent/supervisor.js'
import type { UpgradeFaults } from '../../../src/node-agent/upgrade.js'
import { freePort, waitFor } from '../../helpers/ports.js'
import { fileUrl, fixture, killAll, REPO_ROOT, removeStateDir, sha256Of, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

const RELEASES = path.join(REPO_ROOT, 'chains/devnet/releases')
const release = (version: string) => path.join(RELEASES, `devnet-node-${version}.mjs`)
const artifact = (version: string) => ({ version, url: fileUrl(release(version)), sha256: sha256Of(release(version)) })
const RUN = { runtime: 'node', args: ['--config', '{config_dir}/devnet.json', '--data-dir', '{data_dir}'] }

interface Progress {
  phase: string
  message: string
}

/** The phases in the order reported, consecutive repeats folded. */
const phasesOf = (progress: Progress[]) => progress.map((p) => p.phase).filter((phase, i, all) => i === 0 || all[i - 1] !== phase)

async function clientVersion(port: number): Promise<string> {
  return waitFor(
    async () => {
      const res = await fetch(`http://127.0.0.1:${port}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'web3_clientVersion' }),
      })
      return ((await res.json()) as { result: string }).result
    },
    `devnet-node answering on port ${port}`,
    10_000,
  )
}

async function upgradeFailure(promise: Promise<unknown>): Promise<{ error: CommandError; result: UpgradeResult }> {
  const error = await promise.then(
    () => {
      throw new Error('the upgrade succeeded; a failure was expected')
    },
    (err: unknown) => err,
  )
  expect(error).toBeInstanceOf(CommandError)
  return { error: error as CommandError, result: (error as CommandError).result as UpgradeResult }
}

describe('upgrade with the devnet-node releases', () => {
  let dir: StateDir | undefined
  let supervisor: ChainSupervisor | undefined
  const pids = new Set<number>()

  afterEach(async () => {
    const pid = supervisor?.status().pid
    if (pid) pids.add(pid)
    await supervisor?.close()
    supervisor = undefined
    killAll(pids)
    pids.clear()
    removeStateDir(dir)
    dir = undefined
  })

  interface Node {
    dir: StateDir
    port: number
    executor: Executor
    config: (extra?: Record<string, unknown>) => { path: string; content: string }
    upgrade: (payload: Record<string, unknown>, id?: string) => Promise<{ result: Promise<UpgradeResult>; progress: Progress[] }>
  }

  /** A node configured with devnet-node 1.0.0 (config "A") and running. */
  async function runningNode(faults?: UpgradeFaults, settleMs = 300): Promise<Node> {
    const stateDir = tempStateDir()
    dir = stateDir
    const port = await freePort()
    supervisor = new ChainSupervisor({ stateDir, logger: silentLogger, settleMs, stopGraceMs: 5_000, restartBackoff: { initialMs: 50, maxMs: 200 } })
    const executor = createExecutor({ stateDir, supervisor, logger: silentLogger, faults })
    const config = (extra: Record<string, unknown> = {}) => ({
      path: 'config/devnet.json',
      content: `${JSON.stringify({ rpc_port: port, block_time_ms: 50, peers: 3, ...extra })}\n`,
    })
    const quiet = { progress: () => undefined }
    await executor.execute(
      { id: 'configure-1', type: 'configure', payload: { binary_name: 'devnet-node', artifact: artifact('1.0.0'), files: [config()], run: RUN, config_version: 'a' } },
      quiet,
    )
    await executor.execute({ id: 'start-1', type: 'start', payload: {} }, quiet)
    expect(await clientVersion(port)).toBe('devnet-node/v1.0.0')
    const upgrade = async (payload: Record<string, unknown>, id = 'upgrade-1') => {
      const progress: Progress[] = []
      const result = executor.execute({ id, type: 'upgrade', payload }, { progress: (phase, message) => progress.push({ phase, message }) }) as Promise<UpgradeResult>
      return { result, progress }
    }
    return { dir: stateDir, port, executor, config, upgrade }
  }

  /** After a rollback: 1.0.0 active and answering, config "A" back in place, no download left. */
  async function expectRolledBackToRunningV1(node: Node): Promise<void> {
    expect(readActiveDeployment(node.dir)).toMatchObject({ version: '1.0.0', config_version: 'a' })
    expect(supervisor?.status()).toMatchObject({ process_state: 'running', version: '1.0.0' })
    expect(fs.readFileSync(path.join(node.dir.configDir, 'devnet.json'), 'utf8')).toBe(node.config().content)
    expect(await clientVersion(node.port)).toBe('devnet-node/v1.0.0')
    expect(fs.readdirSync(node.dir.downloadsDir)).toEqual([])
  }

  it('upgrades 1.0.0 to 1.1.0 with new configs through all eight actions, and runs each command id once', async () => {
    const node = await runningNode()
    const before = fs.readFileSync(path.join(node.dir.dataDir, 'chain.json'), 'utf8')
    const { result, progress } = await node.upgrade({ binary_name: 'devnet-node', artifact: artifact('1.1.0'), config_files: [node.config({ peers: 7 })], config_version: 'b' })
    expect(await result).toEqual({
      version: '1.1.0',
      previous_version: '1.0.0',
      phase: 'starting',
      actions_done: ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode', 'InstallArtifact', 'WriteConfigs', 'ReloadDaemon', 'StartNode'],
      actions_skipped: [],
      compensated: [],
    })
    expect(phasesOf(progress)).toEqual(['preparing', 'stopped', 'mutating', 'starting'])
    expect(await clientVersion(node.port)).toBe('devnet-node/v1.1.0')
    expect(readActiveDeployment(node.dir)).toMatchObject({ version: '1.1.0', config_version: 'b' })
    expect(JSON.parse(fs.readFileSync(path.join(node.dir.configDir, 'devnet.json'), 'utf8'))).toMatchObject({ peers: 7 })
    // The chain kept its state across the upgrade, and the backup holds the state from before.
    expect(JSON.parse(fs.readFileSync(path.join(node.dir.dataDir, 'chain.json'), 'utf8')).height).toBeGreaterThanOrEqual(JSON.parse(before).height)
    const backup = path.join(node.dir.backupsDir, 'upgrade-upgrade-1')
    expect(fs.existsSync(path.join(backup, 'data', 'chain.json'))).toBe(true)
    expect(JSON.parse(fs.readFileSync(path.join(backup, 'active.json'), 'utf8'))).toMatchObject({ version: '1.0.0' })
    expect(fs.readdirSync(node.dir.downloadsDir)).toEqual([])

    const pid = supervisor?.status().pid
    const again = await node.upgrade({ binary_name: 'devnet-node', artifact: artifact('1.1.0'), config_files: [node.config({ peers: 7 })], config_version: 'b' })
    expect(await again.result).toMatchObject({ version: '1.1.0', phase: 'starting' })
    expect(again.progress).toEqual([])
    expect(supervisor?.status().pid).toBe(pid)
  })

  it('skips WriteConfigs when the configs are unchanged or absent', async () => {
    const node = await runningNode()
    const unchanged = await node.upgrade({ artifact: artifact('1.1.0'), config_files: [node.config()] })
    expect(await unchanged.result).toMatchObject({ phase: 'starting', actions_skipped: ['WriteConfigs'] })
    expect(unchanged.progress).toContainEqual({ phase: 'mutating', message: 'WriteConfigs skipped: config files unchanged' })
    expect(await clientVersion(node.port)).toBe('devnet-node/v1.1.0')

    // Back to 1.0.0 without configs: 1.0.0 is still installed, so only active.json switches.
    const back = await node.upgrade({ artifact: artifact('1.0.0') }, 'upgrade-2')
    expect(await back.result).toMatchObject({
      version: '1.0.0',
      previous_version: '1.1.0',
      actions_done: ['BackupCurrentState', 'StopNode', 'InstallArtifact', 'ReloadDaemon', 'StartNode'],
      actions_skipped: ['AcquireArtifact', 'VerifyArtifact', 'WriteConfigs'],
    })
    expect(await clientVersion(node.port)).toBe('devnet-node/v1.0.0')
  })

  const failures: Array<{ action: UpgradeAction; compensated: UpgradeAction[]; phases: string[] }> = [
    { action: 'BackupCurrentState', compensated: [], phases: ['preparing', 'rollbacking'] },
    { action: 'AcquireArtifact', compensated: ['BackupCurrentState'], phases: ['preparing', 'rollbacking'] },
    { action: 'VerifyArtifact', compensated: ['AcquireArtifact', 'BackupCurrentState'], phases: ['preparing', 'rollbacking'] },
    { action: 'StopNode', compensated: ['VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'], phases: ['preparing', 'stopped', 'rollbacking'] },
    {
      action: 'InstallArtifact',
      compensated: ['StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
      phases: ['preparing', 'stopped', 'mutating', 'rollbacking'],
    },
    {
      action: 'WriteConfigs',
      compensated: ['InstallArtifact', 'StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
      phases: ['preparing', 'stopped', 'mutating', 'rollbacking'],
    },
    {
      action: 'ReloadDaemon',
      compensated: ['WriteConfigs', 'InstallArtifact', 'StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
      phases: ['preparing', 'stopped', 'mutating', 'rollbacking'],
    },
    {
      action: 'StartNode',
      compensated: ['ReloadDaemon', 'WriteConfigs', 'InstallArtifact', 'StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
      phases: ['preparing', 'stopped', 'mutating', 'starting', 'rollbacking'],
    },
  ]

  it.each(failures)('a failure at $action compensates the completed actions in reverse order', async ({ action, compensated, phases }) => {
    const node = await runningNode({ failAction: action })
    const { result, progress } = await node.upgrade({ artifact: artifact('1.1.0'), config_files: [node.config({ peers: 7 })], config_version: 'b' })
    const failure = await upgradeFailure(result)
    expect(failure.error.message).toContain(`upgrade failed at ${action} (injected failure at ${action} (test fault)); rolled back to version 1.0.0`)
    expect(failure.result).toMatchObject({ version: '1.1.0', previous_version: '1.0.0', phase: 'rolled_back', compensated })
    expect(failure.result.actions_done).toEqual([...compensated].reverse())
    expect(failure.result.compensation_error).toBeUndefined()
    expect(phasesOf(progress)).toEqual(phases)
    expect(progress.filter((p) => p.message.startsWith('compensating ')).map((p) => p.message)).toEqual(compensated.map((a) => `compensating ${a}`))
    await expectRolledBackToRunningV1(node)
  })

  it('refuses a release of another binary than the node runs, before touching anything', async () => {
    const node = await runningNode()
    const pid = supervisor?.status().pid
    const { result, progress } = await node.upgrade({ binary_name: 'sidecar', artifact: artifact('1.1.0') })
    const failure = await upgradeFailure(result)
    expect(failure.error.message).toBe('this node runs devnet-node; it has no binary sidecar to upgrade')
    // Reported as undone (nothing was done), so the control plane does not degrade the node.
    expect(failure.result).toEqual({ version: '1.1.0', previous_version: '1.0.0', phase: 'rolled_back', actions_done: [], actions_skipped: [], compensated: [] })
    expect(progress).toEqual([])
    expect(supervisor?.status().pid).toBe(pid)
    expect(readActiveDeployment(node.dir)).toMatchObject({ binary_name: 'devnet-node', version: '1.0.0', config_version: 'a' })
    expect(fs.readdirSync(node.dir.backupsDir)).toEqual([])
    expect(await clientVersion(node.port)).toBe('devnet-node/v1.0.0')
  })

  it('rolls back a checksum mismatch at VerifyArtifact without stopping the node', async () => {
    const node = await runningNode()
    const pid = supervisor?.status().pid
    const { result } = await node.upgrade({ artifact: { ...artifact('1.1.0'), sha256: sha256Of(release('1.0.0')) }, config_files: [node.config({ peers: 7 })] })
    const failure = await upgradeFailure(result)
    // Neither digest is echoed (docs/artifacts.md): what was fetched may be any file.
    expect(failure.error.message).toContain('failed at VerifyArtifact (artifact checksum mismatch)')
    expect(JSON.stringify(failure)).not.toMatch(/[0-9a-f]{64}/)
    expect(failure.result).toMatchObject({ phase: 'rolled_back', compensated: ['AcquireArtifact', 'BackupCurrentState'] })
    expect(supervisor?.status().pid).toBe(pid)
    await expectRolledBackToRunningV1(node)
  })

  it('rolls back when the artifact URL is unreachable', async () => {
    const node = await runningNode()
    const port = await freePort()
    const { result } = await node.upgrade({ artifact: { ...artifact('1.1.0'), url: `http://127.0.0.1:${port}/devnet-node-1.1.0.mjs?signature=secret` } })
    const failure = await upgradeFailure(result)
    // The same words as for an open port answering 404 (test/integration/artifacts/agent-failures.test.ts).
    expect(failure.error.message).toContain(`failed at AcquireArtifact (artifact not found at http://127.0.0.1:${port}/devnet-node-1.1.0.mjs)`)
    expect(failure.error.message).not.toContain('secret')
    expect(failure.result).toMatchObject({ phase: 'rolled_back', compensated: ['BackupCurrentState'] })
    await expectRolledBackToRunningV1(node)
  })

  it('acquires the artifact over HTTP', async () => {
    const node = await runningNode()
    const server = http.createServer((req, res) => {
      if (req.url === '/devnet-node-1.1.0.mjs') res.writeHead(200).end(fs.readFileSync(release('1.1.0')))
      else res.writeHead(404).end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const { port } = server.address() as { port: number }
      const missing = await node.upgrade({ artifact: { ...artifact('1.1.0'), url: `http://127.0.0.1:${port}/nope.mjs` } })
      expect((await upgradeFailure(missing.result)).error.message).toContain('(artifact not found at http://127.0.0.1:')
      const { result } = await node.upgrade({ artifact: { ...artifact('1.1.0'), url: `http://127.0.0.1:${port}/devnet-node-1.1.0.mjs` } }, 'upgrade-2')
      expect(await result).toMatchObject({ phase: 'starting', actions_skipped: ['WriteConfigs'] })
      expect(await clientVersion(node.port)).toBe('devnet-node/v1.1.0')
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('rolls back to the running old version when the new version crashes at start', async () => {
    // The settle period must outlast Node's own start-up plus crash_after_ms, even on a busy machine.
    const node = await runningNode(undefined, 2_000)
    const { result, progress } = await node.upgrade({ artifact: artifact('1.1.0'), config_files: [node.config({ crash_after_ms: 20 })], config_version: 'b' })
    const failure = await upgradeFailure(result)
    expect(failure.error.message).toMatch(/failed at StartNode \(the chain process exited during start \(exit code 1\); last output: .*crashing after 20 ms/)
    expect(failure.result).toMatchObject({
      phase: 'rolled_back',
      compensated: ['ReloadDaemon', 'WriteConfigs', 'InstallArtifact', 'StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
    })
    expect(phasesOf(progress)).toEqual(['preparing', 'stopped', 'mutating', 'starting', 'rollbacking'])
    await expectRolledBackToRunningV1(node)
  })

  it('reports failed_rollback when a compensation fails, and stops compensating there', async () => {
    const node = await runningNode({ failAction: 'StartNode', failCompensation: 'InstallArtifact' })
    const payload = { artifact: artifact('1.1.0'), config_files: [node.config({ peers: 7 })], config_version: 'b' }
    const { result, progress } = await node.upgrade(payload)
    const failure = await upgradeFailure(result)
    expect(failure.error.message).toContain('manual intervention needed')
    expect(failure.result).toMatchObject({
      phase: 'failed_rollback',
      compensated: ['ReloadDaemon', 'WriteConfigs'],
      compensation_error: 'InstallArtifact: injected compensation failure at InstallArtifact (test fault)',
    })
    expect(phasesOf(progress)).toEqual(['preparing', 'stopped', 'mutating', 'starting', 'rollbacking'])
    // Configs are back, but active.json still names 1.1.0 and nothing runs: a person takes over.
    expect(fs.readFileSync(path.join(node.dir.configDir, 'devnet.json'), 'utf8')).toBe(node.config().content)
    expect(readActiveDeployment(node.dir)?.version).toBe('1.1.0')
    expect(supervisor?.status().process_state).toBe('stopped')

    // The same command again returns the recorded failure; it does not run again.
    const again = await node.upgrade(payload)
    const repeated = await upgradeFailure(again.result)
    expect(repeated.error.message).toBe(failure.error.message)
    expect(repeated.result).toEqual(failure.result)
    expect(again.progress).toEqual([])
  })

  /**
   * Configures and starts 1.0.0 and begins the upgrade to 1.1.0 in a child agent process that
   * kills itself (SIGKILL) at the progress message `killAt`.
   */
  async function upgradeInKilledAgent(killAt: string, env: Record<string, string> = {}): Promise<{ stateDir: StateDir; port: number; upgrade: AgentCommand; config: (peers: number) => { path: string; content: string } }> {
    const stateDir = tempStateDir()
    dir = stateDir
    const port = await freePort()
    const config = (peers: number) => ({ path: 'config/devnet.json', content: `${JSON.stringify({ rpc_port: port, block_time_ms: 50, peers })}\n` })
    const upgrade: AgentCommand = { id: 'upgrade-1', type: 'upgrade', payload: { artifact: artifact('1.1.0'), config_files: [config(7)] } }
    const commands: AgentCommand[] = [
      { id: 'configure-1', type: 'configure', payload: { binary_name: 'devnet-node', artifact: artifact('1.0.0'), files: [config(3)], run: RUN } },
      { id: 'start-1', type: 'start', payload: {} },
      upgrade,
    ]
    const commandsFile = path.join(stateDir.root, 'test-commands.json')
    fs.writeFileSync(commandsFile, JSON.stringify(commands))
    const agent = spawn(process.execPath, ['--import', 'tsx', fixture('agent-process.ts'), 'execute', stateDir.root, commandsFile, killAt], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, ...env },
    })
    const [, signal] = (await new Promise((resolve) => agent.once('exit', (...args) => resolve(args)))) as [number | null, string | null]
    expect(signal).toBe('SIGKILL')
    return { stateDir, port, upgrade, config }
  }

  function restartedAgent(stateDir: StateDir): Executor {
    supervisor = new ChainSupervisor({ stateDir, logger: silentLogger, settleMs: 300, stopGraceMs: 5_000 })
    return createExecutor({ stateDir, supervisor, logger: silentLogger })
  }

  it('resumes an upgrade whose agent was killed, skipping the actions already done', async () => {
    const { stateDir, port, upgrade } = await upgradeInKilledAgent('InstallArtifact')
    expect(readCommandJournal(stateDir, 'upgrade-1')).toMatchObject({
      status: 'running',
      upgrade: { actions_done: ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode'] },
    })
    // StopNode ran before the kill, so no chain process was left behind.
    expect(fs.existsSync(stateDir.pidFile)).toBe(false)

    const executor = restartedAgent(stateDir)
    const progress: Progress[] = []
    const result = await executor.execute(upgrade, { progress: (phase, message) => progress.push({ phase, message }) })
    expect(result).toMatchObject({
      phase: 'starting',
      actions_done: ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode', 'InstallArtifact', 'WriteConfigs', 'ReloadDaemon', 'StartNode'],
    })
    expect(progress.slice(0, 4).map((p) => p.message)).toEqual(
      ['BackupCurrentState', 'AcquireArtifact', 'VerifyArtifact', 'StopNode'].map((a) => `${a}: already done before the agent restarted`),
    )
    expect(progress.slice(4).map((p) => p.message)).toEqual(['InstallArtifact', 'WriteConfigs', 'ReloadDaemon', 'StartNode'])
    expect(await clientVersion(port)).toBe('devnet-node/v1.1.0')
    const pid = supervisor?.status().pid
    expect(pid !== undefined && isProcessAlive(pid)).toBe(true)
  })

  it('resumes a rollback whose agent was killed during compensation', async () => {
    const { stateDir, port, upgrade, config } = await upgradeInKilledAgent('compensating InstallArtifact', { AGENT_FAIL_ACTION: 'StartNode' })
    expect(readCommandJournal(stateDir, 'upgrade-1')).toMatchObject({
      status: 'running',
      upgrade: { failure: { action: 'StartNode' }, compensated: ['ReloadDaemon', 'WriteConfigs'] },
    })

    const executor = restartedAgent(stateDir)
    const progress: Progress[] = []
    const failure = await upgradeFailure(executor.execute(upgrade, { progress: (phase, message) => progress.push({ phase, message }) }))
    expect(failure.result).toMatchObject({
      phase: 'rolled_back',
      compensated: ['ReloadDaemon', 'WriteConfigs', 'InstallArtifact', 'StopNode', 'VerifyArtifact', 'AcquireArtifact', 'BackupCurrentState'],
    })
    expect(phasesOf(progress)).toEqual(['rollbacking'])
    expect(readActiveDeployment(stateDir)?.version).toBe('1.0.0')
    expect(fs.readFileSync(path.join(stateDir.configDir, 'devnet.json'), 'utf8')).toBe(config(3).content)
    expect(await clientVersion(port)).toBe('devnet-node/v1.0.0')
  })
})
