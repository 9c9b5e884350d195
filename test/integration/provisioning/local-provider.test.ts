import fs from 'node:fs'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest'
import { enqueueCommand, getCommand, type AgentCommand } from '../../../src/agent-gateway/commands.js'
import type { CommandType } from '../../../src/agent-gateway/protocol.js'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import { defaultConfigDir, getProfile, loadChainCatalogue, releaseFor, renderNodeConfig, type ChainProfile } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { isNodeAgentProcess as isAlive } from '../../../src/node-agent/lock.js'
import { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import { generateBoxKeyPair, open, seal, type SealedBox } from '../../../src/secrets/sealed-box.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { freePort, waitFor } from '../../helpers/ports.js'
import { devTls, quiet, startGateway, type RunningGateway } from '../agent-gateway/harness.js'
import { withDevnetBlockTime } from './harness.js'

async function rpc(port: number, method: string): Promise<unknown> {
  const response = await fetch(`http://127.0.0.1:${port}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }),
    signal: AbortSignal.timeout(2_000),
  })
  return ((await response.json()) as { result?: unknown }).result
}

async function answers(port: number): Promise<boolean> {
  try {
    await rpc(port, 'eth_blockNumber')
    return true
  } catch {
    return false
  }
}

// The two dialects' cases at the same time, each with a gateway and hosts directory of its own:
// most of the time here is waiting on an agent, its chain and their heartbeats.
describeEachDialectConcurrently('local infrastructure provider with a real node agent on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway
  let provider: LocalInfrastructureProvider
  let profile: ChainProfile
  let root: string
  const hosts: string[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    gateway = await startGateway(db, { heartbeatFlushIntervalMs: 50, commandPollIntervalMs: 50 })
    root = tempDir('nodeplane-hosts-')
    provider = new LocalInfrastructureProvider({
      root,
      logger: quiet,
      agentEnv: { LOG_LEVEL: 'info', NODE_AGENT_HEARTBEAT_INTERVAL: '200ms', NODE_AGENT_PROGRESS_CHECK_INTERVAL: '1s' },
      stopGraceMs: 10_000,
    })
    // Blocks every 100 ms, not 500: the chain's sync is shorter.
    profile = getProfile(withDevnetBlockTime(await loadChainCatalogue(defaultConfigDir()), 100), 'devnet')
  })
  afterEach(async () => {
    for (const host of hosts.splice(0)) await provider.destroyHost(host)
  })
  afterAll(async () => {
    await gateway.stop()
    await t.destroy()
  })

  async function createHost(nodeId: string, token: string) {
    const host = await provider.createHost({
      nodeId,
      hostKey: nodeId,
      chainProfileId: 'devnet',
      nodeType: 'full',
      region: 'local',
      instanceType: 'local.small',
      agent: { gatewayTarget: gateway.target, caPem: devTls().ca.toString(), token },
    })
    hosts.push(host.host_id)
    return host
  }

  async function run(nodeId: string, type: CommandType, payload: unknown): Promise<AgentCommand> {
    const command = await enqueueCommand(db, { nodeId, type, payload })
    return waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.status === 'completed' || c.status === 'failed' ? c : undefined
    }, `${type} to finish`, 60_000, 50)
  }

  it('creates a host whose agent registers, configures and starts devnet-node, reports sync and metrics, upgrades it, and is destroyed with its chain process', async () => {
    const node = await insertTestNode(db)
    const token = await createAgentToken(db, node.id)
    const host = await createHost(node.id, token)
    expect(host).toMatchObject({ provider: 'local', host_ip: '127.0.0.1', region: 'local', instance_type: 'local.small' })
    const dir = provider.hostDir(host.host_id)
    expect(fs.statSync(path.join(dir, 'agent-token')).mode & 0o777).toBe(0o600)
    expect(await provider.hostStatus(host.host_id)).toBe('running')
    // Idempotent by host key: a retried step gets the same host (its agent restarted), not a second one.
    const firstPid = (JSON.parse(fs.readFileSync(path.join(dir, 'host.json'), 'utf8')) as { pid: number }).pid
    const again = await createHost(node.id, token)
    expect(again.host_id).toBe(host.host_id)
    hosts.pop()
    expect(isAlive(firstPid)).toBe(false)
    expect(fs.readdirSync(root)).toEqual([host.host_id])
    // The agent writes its log into the host's file itself, not through the process that created
    // the host: an orchestrator killed later must not take the agent's output (stdout) with it.
    const agentPid = (JSON.parse(fs.readFileSync(path.join(dir, 'host.json'), 'utf8')) as { pid: number }).pid
    for (const fd of [1, 2]) expect(fs.readlinkSync(`/proc/${agentPid}/fd/${fd}`)).toBe(path.join(dir, 'agent.log'))

    const registration = await waitFor(async () => findRegistration(db, node.id), 'agent registration', 30_000)
    expect(registration.agent_version).toBe('0.1.0')

    const rpcPort = await freePort()
    const configure = await run(node.id, 'configure', renderNodeConfig(profile, 'full', { rpc_port: rpcPort, node_id: node.id }))
    expect(configure.status, configure.error ?? '').toBe('completed')
    expect(configure.result).toMatchObject({ binary_version: '1.0.0' })
    const start = await run(node.id, 'start', {})
    expect(start.status, start.error ?? '').toBe('completed')
    // `start` succeeds once the process has stayed up through its settle period (docs/node-agent.md),
    // not once the chain listens: on a busy machine its RPC port may open a moment later.
    expect(await waitFor(() => rpc(rpcPort, 'web3_clientVersion'), 'the chain to answer', 10_000)).toBe('devnet-node/v1.0.0')

    // Heartbeats carry the probe's view: the devnet node syncs 3 blocks, then is synced.
    // The node row and agent_status are written by the heartbeat batch; wait for both, as a
    // heartbeat taken before the chain answered may land after the one that set synced.
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'sync_status synced', 30_000, 100)
    const status = await waitFor(async () => {
      const row = (await db('agent_status').where({ node_id: node.id }).first()) as { process_state: string; metrics: unknown } | undefined
      return row?.process_state === 'running' ? row : undefined
    }, 'process_state running', 10_000, 100)
    expect(status).toMatchObject({ process_state: 'running', binary_version: '1.0.0' })
    expect(fromJson<Record<string, number>>(status.metrics)).toMatchObject({ rpc_up: 1, peer_count: 3 })

    // Chain-generated key captured sealed to the control plane's key; keys injected sealed to the agent's.
    const recipient = generateBoxKeyPair()
    const captured = await run(node.id, 'capture_keys', { paths: ['data/nodekey'], recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') })
    expect(captured.status, captured.error ?? '').toBe('completed')
    const sealed = (captured.result as { keys: { path: string; sealed: SealedBox }[] }).keys[0]
    expect(Buffer.from(open(sealed!.sealed, recipient.secretKey)).toString('utf8').trim()).toMatch(/^[0-9a-f]{64}$/)
    const agentKey = Buffer.from(registration.public_key, 'base64')
    const injected = await run(node.id, 'inject_keys', { keys: [{ path: 'validator.key', sealed: seal(Buffer.from('secret-validator-key'), agentKey) }] })
    expect(injected.status, injected.error ?? '').toBe('completed')
    expect(JSON.stringify(injected.result)).not.toContain('secret-validator-key')
    const keyFile = path.join(dir, 'state', 'keys', 'validator.key')
    expect(fs.readFileSync(keyFile, 'utf8')).toBe('secret-validator-key')
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600)

    const target = releaseFor(profile, '1.1.0')
    const upgrade = await run(node.id, 'upgrade', { artifact: { version: target.version, url: target.url, sha256: target.sha256 } })
    expect(upgrade.status, upgrade.error ?? '').toBe('completed')
    expect(upgrade.result).toMatchObject({ version: '1.1.0', previous_version: '1.0.0' })
    // As for `start`: the new version's process has stayed up through its settle period.
    expect(await waitFor(() => rpc(rpcPort, 'web3_clientVersion'), 'the new version to answer', 10_000)).toBe('devnet-node/v1.1.0')
    await waitFor(async () => (await db('agent_status').where({ node_id: node.id }).first())?.binary_version === '1.1.0', 'heartbeat with the new version')

    const { pid } = JSON.parse(fs.readFileSync(path.join(dir, 'host.json'), 'utf8')) as { pid: number }
    await provider.destroyHost(host.host_id)
    hosts.splice(hosts.indexOf(host.host_id), 1)
    expect(isAlive(pid)).toBe(false)
    expect(fs.existsSync(dir)).toBe(false)
    expect(await provider.hostStatus(host.host_id)).toBe('missing')
    expect(await answers(rpcPort)).toBe(false)
    // Destroying a host that is already gone succeeds.
    await provider.destroyHost(host.host_id)
  })

  it('an agent given a wrong token is refused, exits, and says why in its log', async () => {
    const node = await insertTestNode(db)
    await createAgentToken(db, node.id)
    const host = await createHost(node.id, `npt_${'x'.repeat(43)}`)
    await waitFor(async () => (await provider.hostStatus(host.host_id)) === 'stopped', 'agent exit', 30_000, 100)
    const log = fs.readFileSync(path.join(provider.hostDir(host.host_id), 'agent.log'), 'utf8')
    expect(log).toContain('the agent-gateway refused this agent')
    expect(log).toContain('UNAUTHENTICATED')
    expect(log).not.toContain('xxxxxxxx')
    expect(await findRegistration(db, node.id)).toBeUndefined()
  })

  it('creating again after this attempt’s token replaced the first agent’s (refused, superseded) starts an agent that registers', async () => {
    const node = await insertTestNode(db)
    const host = await createHost(node.id, `npt_${'y'.repeat(43)}`)
    await waitFor(async () => (await provider.hostStatus(host.host_id)) === 'stopped', 'the first agent to be refused', 30_000, 100)
    expect(fs.existsSync(path.join(provider.hostDir(host.host_id), 'state', 'superseded.json'))).toBe(true)
    const recreatedAt = new Date()
    await createHost(node.id, await createAgentToken(db, node.id))
    await waitFor(
      async () => {
        const registration = await findRegistration(db, node.id)
        return registration && registration.registered_at >= recreatedAt && registration.connected_at && !registration.disconnected_at
      },
      'the new agent to register',
      30_000,
      100,
    )
    expect(await provider.hostStatus(host.host_id)).toBe('running')
  })
})
