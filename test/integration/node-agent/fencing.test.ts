/**
 * Fencing (issue 19; docs/node-agent.md, "Fencing"): real node agents (child processes of the
 * local provider) running real devnet chains, reaching a real agent-gateway (gRPC with TLS)
 * through a TCP proxy of the test's own, which the test cuts silently (as a pulled cable does).
 *
 * - cut off longer than the fence timeout, the agent stops its chain by itself and lives on; back
 *   and not superseded, the chain starts again and the node carries on;
 * - cut off while a migration replaced its token, the agent learns on its return that it was
 *   superseded: the chain never starts again, the node's state is removed, the agent exits 77, and
 *   an agent started again on that directory exits 77 at once;
 * - the migrate workflow starts the replacement no earlier than the old agent's last heartbeat plus
 *   the fence timeout, and never while the old chain still runs.
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect, it, onTestFailed } from 'vitest'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import { toDate } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { packageRoot } from '../../../src/package-root.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { requestMigration, requestProvision, type LifecycleDeps, type MigrateResult } from '../../../src/provisioning/index.js'
import type { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import type { InfrastructureProvider } from '../../../src/provisioning/infrastructure/types.js'
import { listSteps, type WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js'
import type { RunningGateway } from '../agent-gateway/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished } from '../provisioning/harness.js'

/** Short, so the tests are; the agents heartbeat every 200 ms (the harness). */
const FENCE_MS = 2_500

/**
 * The real agent under a wrapper that records its exit status in the host directory (the local
 * provider starts agents detached, so their status is not otherwise observable). Named so that
 * the provider still knows it for a node agent.
 */
function agentWrapper(): string {
  const file = path.join(tempDir('nodeplane-fencing-'), 'node-agent-wrapper.mjs')
  fs.writeFileSync(
    file,
    `import { spawn } from 'node:child_process'
import fs from 'node:fs'
const child = spawn(process.execPath, [${JSON.stringify(path.join(packageRoot(), 'bin', 'run.js'))}, 'daemon', 'node-agent'], { stdio: 'inherit' })
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => child.kill(signal))
child.on('exit', (code, signal) => {
  fs.writeFileSync('agent-exit.json', JSON.stringify({ code, signal }))
  process.exit(code ?? 1)
})
`,
  )
  return file
}

/** Pids of processes whose command line names a directory under `prefix` (chains; agents name none). */
function processesUnder(prefix: string): number[] {
  const found: number[] = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').some((arg) => arg.startsWith(prefix))) found.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return found
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return !/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

/** Samples every 250 ms until stopped: the chain processes found at each instant. */
function sampleChains(prefix: string): { stop(): Promise<Array<{ at: number; pids: number[] }>> } {
  const samples: Array<{ at: number; pids: number[] }> = []
  let running = true
  const loop = (async () => {
    while (running) {
      samples.push({ at: Date.now(), pids: processesUnder(prefix) })
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  })()
  return {
    async stop() {
      running = false
      await loop
      return samples
    },
  }
}

describeEachDialectConcurrently('fencing with real agents and chains on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway
  let provider: LocalInfrastructureProvider
  let deps: LifecycleDeps
  let worker: WorkflowWorker
  let root: string
  let store: string
  const proxies = new Map<string, TcpProxy>()
  const nodes: Array<{ id: string; hostId: string; proxy: TcpProxy }> = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    ;({ gateway, provider, deps, root, store } = await lifecycleSetting(db, {
      fenceTimeoutMs: FENCE_MS,
      devnetBlockTimeMs: 100,
      agentCommand: [process.execPath, agentWrapper()],
    }))
    // Each node's first host dials the gateway through a proxy of its own (the real local provider
    // creates it, told that target); its replacement (the migration below) dials the gateway.
    const local = provider
    const throughProxy: InfrastructureProvider = {
      name: local.name,
      createHost: (spec) => {
        // Provisioning's host key is the node id; a migration's has a suffix.
        const proxy = spec.hostKey === spec.nodeId ? proxies.get(spec.nodeId) : undefined
        return local.createHost(proxy ? { ...spec, agent: { ...spec.agent, gatewayTarget: proxy.target } } : spec)
      },
      destroyHost: (hostId) => local.destroyHost(hostId),
      hostStatus: (hostId) => local.hostStatus(hostId),
    }
    deps = { ...deps, providers: new Map([[local.name, throughProxy]]) }
    worker = startLifecycleWorker(db, deps)
    const provisioned = await Promise.all(
      [0, 1, 2].map(async () => {
        const node = await insertTestNode(db)
        const proxy = await startTcpProxy(gateway.target)
        proxies.set(node.id, proxy)
        const run = await untilRunFinished(db, (await requestProvision(db, node.id)).run.id)
        expect(run.status, run.error ?? '').toBe('completed')
        return { id: node.id, hostId: String((await findNode(db, node.id))?.host_id), proxy }
      }),
    )
    nodes.push(...provisioned)
  }, 120_000)

  afterAll(async () => {
    await worker?.stop()
    if (root) for (const host of fs.readdirSync(root)) await provider.destroyHost(host).catch(() => undefined)
    for (const proxy of proxies.values()) await proxy.close()
    await gateway?.stop()
    await t?.destroy()
    if (store) fs.rmSync(store, { recursive: true, force: true })
  })

  const hostDir = (hostId: string) => path.join(root, hostId)
  const stateDir = (hostId: string) => path.join(hostDir(hostId), 'state')
  const agentPid = (hostId: string) => Number(fs.readFileSync(path.join(stateDir(hostId), 'agent.pid'), 'utf8'))
  const chainPid = (hostId: string): number | undefined => {
    try {
      return (JSON.parse(fs.readFileSync(path.join(stateDir(hostId), 'chain.pid'), 'utf8')) as { pid: number }).pid
    } catch {
      return undefined
    }
  }
  const agentLog = (hostId: string) => fs.readFileSync(path.join(hostDir(hostId), 'agent.log'), 'utf8')
  const lastHeartbeat = async (nodeId: string): Promise<number> => {
    const row = (await db('nodes').where({ id: nodeId }).first('last_heartbeat')) as { last_heartbeat: unknown }
    return toDate(row.last_heartbeat).getTime()
  }
  /** The heartbeat recorded last before a cut: none arrives once the proxy is silent. */
  const settledLastHeartbeat = async (nodeId: string): Promise<number> => {
    let previous = await lastHeartbeat(nodeId)
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 400))
      const now = await lastHeartbeat(nodeId)
      if (now === previous) return now
      previous = now
    }
  }

  it('cut off longer than the fence timeout: the agent stops its chain and lives on; back and not superseded, the chain runs again', { timeout: 60_000 }, async () => {
    const node = nodes[0]!
    onTestFailed(() => console.log(agentLog(node.hostId).slice(-6000)))
    const before = await waitFor(async () => chainPid(node.hostId), 'the chain running')
    expect(isAlive(before)).toBe(true)
    const agent = agentPid(node.hostId)

    node.proxy.cut()
    await waitFor(async () => !isAlive(before), 'the agent to stop its chain', 30_000, 50)
    expect(processesUnder(hostDir(node.hostId))).toEqual([])
    expect(isAlive(agent)).toBe(true)
    // Recorded once the stop is over.
    const fence = await waitFor(async () => {
      try {
        return JSON.parse(fs.readFileSync(path.join(stateDir(node.hostId), 'fence.json'), 'utf8')) as { reason: string; stopped_pid: number; timeout_ms: number }
      } catch {
        return undefined
      }
    }, 'fence.json')
    expect(fence).toMatchObject({ stopped_pid: before, timeout_ms: FENCE_MS })
    expect(fence.reason).toContain('no heartbeat acknowledged by any agent-gateway')
    expect(agentLog(node.hostId)).toContain('fence: stopping the chain process')
    // Still cut off: it stays stopped (the supervisor does not restart a fenced chain).
    await new Promise((resolve) => setTimeout(resolve, 1_000))
    expect(processesUnder(hostDir(node.hostId))).toEqual([])

    const cutBeat = await lastHeartbeat(node.id)
    node.proxy.restore()
    const after = await waitFor(async () => {
      const pid = chainPid(node.hostId)
      return pid !== undefined && pid !== before && isAlive(pid) ? pid : undefined
    }, 'the chain running again', 30_000, 50)
    expect(isAlive(agent)).toBe(true)
    expect(fs.existsSync(path.join(stateDir(node.hostId), 'fence.json'))).toBe(false)
    await waitFor(async () => (await lastHeartbeat(node.id)) > cutBeat, 'heartbeats again', 20_000, 50)
    // Logged once the start has settled.
    await waitFor(async () => agentLog(node.hostId).includes('the chain process was started again after the fence'), 'the restart logged', 20_000, 50)
    expect(processesUnder(hostDir(node.hostId))).toEqual([after])
  })

  it('superseded while cut off: on its return the agent removes the node state, never starts the chain again, exits 77, and stays down', { timeout: 60_000 }, async () => {
    const node = nodes[1]!
    const before = await waitFor(async () => chainPid(node.hostId), 'the chain running')
    node.proxy.cut()
    await waitFor(async () => !isAlive(before), 'the agent to stop its chain', 30_000, 50)
    const sampler = sampleChains(hostDir(node.hostId))
    // What a migration's create-host does while the old host is away.
    await createAgentToken(db, node.id)
    node.proxy.restore()
    const exit = await waitFor(async () => {
      try {
        return JSON.parse(fs.readFileSync(path.join(hostDir(node.hostId), 'agent-exit.json'), 'utf8')) as { code: number | null }
      } catch {
        return undefined
      }
    }, 'the agent to exit', 30_000, 50)
    // A little longer: nothing starts after the exit either.
    await new Promise((resolve) => setTimeout(resolve, 750))
    const samples = await sampler.stop()
    expect(exit.code).toBe(77)
    expect(samples.filter((s) => s.pids.length > 0)).toEqual([])
    expect(samples.length).toBeGreaterThan(2)

    const state = stateDir(node.hostId)
    for (const gone of ['data', 'keys', 'config', 'releases', 'active.json', 'agent-key', 'chain.wanted', 'fence.json']) expect(fs.existsSync(path.join(state, gone)), gone).toBe(false)
    expect(JSON.parse(fs.readFileSync(path.join(state, 'superseded.json'), 'utf8'))).toMatchObject({ reason: expect.stringContaining('UNAUTHENTICATED') })
    expect(agentLog(node.hostId)).toContain('superseded: the agent-gateway refused this agent')

    // Started again on that directory (no RestartPreventExitStatus, a person): it refuses at once.
    const again = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        [path.join(packageRoot(), 'bin', 'run.js'), 'daemon', 'node-agent'],
        {
          env: {
            PATH: process.env.PATH ?? '/usr/bin:/bin',
            AGENT_GATEWAY_URL: gateway.target,
            AGENT_GATEWAY_CA_FILE: path.join(hostDir(node.hostId), 'gateway-ca.pem'),
            NODE_AGENT_NODE_ID: node.id,
            NODE_AGENT_TOKEN_FILE: path.join(hostDir(node.hostId), 'agent-token'),
            NODE_AGENT_STATE_DIR: state,
            LOG_LEVEL: 'info',
          },
          timeout: 30_000,
        },
        (_err, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
      )
    })
    expect(again.code).toBe(77)
    expect(fs.existsSync(path.join(state, 'data'))).toBe(false)
  })

  it('the migrate workflow starts the replacement no earlier than the old agent’s last heartbeat plus the fence timeout, and never beside the old chain', { timeout: 90_000 }, async () => {
    const node = nodes[2]!
    const old = await waitFor(async () => chainPid(node.hostId), 'the chain running')
    const sampler = sampleChains(path.join(root, `local-${node.id}`))
    node.proxy.cut()
    const lastBeat = await settledLastHeartbeat(node.id)
    // At once, as an operator's `node migrate` may: well inside the old agent's fence timeout.
    await setNodeState(db, node.id, 'down')
    const requested = await requestMigration(db, node.id, { reason: 'host cut off' })
    const run = await untilRunFinished(db, requested.run.id, 60_000)
    const samples = await sampler.stop()
    expect(run.status, run.error ?? '').toBe('completed')
    expect((run.result as MigrateResult).outcome).toBe('migrated')

    const steps = await listSteps(db, requested.run.id)
    const step = (name: string) => steps.find((s) => s.stepKey === `${name}#0`)
    const fenceUntil = new Date((step('create-host')?.result as { fence_until: string }).fence_until).getTime()
    const startedAt = step('start')?.startedAt?.getTime() ?? Number.NaN
    expect(fenceUntil).toBeGreaterThanOrEqual(lastBeat + FENCE_MS)
    expect(startedAt).toBeGreaterThanOrEqual(fenceUntil)
    // A durable timer held the run (no process slept through it).
    const timers = (await db('workflow_timers').where({ run_id: requested.run.id })) as Array<{ fire_at: unknown; fired_at: unknown }>
    expect(timers.map((x) => toDate(x.fire_at).getTime())).toContain(fenceUntil)

    // Never two chain processes for the node at one instant; the old one was gone first.
    expect(samples.filter((s) => s.pids.length > 1)).toEqual([])
    const firstNew = samples.find((s) => s.pids.some((pid) => pid !== old))
    expect(firstNew, 'the new chain seen running').toBeDefined()
    expect(samples.filter((s) => s.at >= (firstNew?.at ?? 0)).some((s) => s.pids.includes(old))).toBe(false)
  })
})
