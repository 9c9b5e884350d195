/**
 * The fleet journey of issue 19 ("Proven on several real hosts") on three network-namespace hosts
 * running sshd (test/helpers/netns.ts), with the control plane of fleet-stack.ts: the `ssh`
 * provider, real agents from the one-file bundle and real devnet chains in the namespaces, the
 * health evaluation cycle with the migration trigger, the host probe, the host-drain workflow, the
 * incident consumer. Run on SQLite by fleet-journey.sqlite.test.ts and on Postgres by
 * fleet-journey.postgres.test.ts, one fleet per file, its steps in order.
 *
 * Capacities (cpu; each node needs 1): A 6, B 2, C 2. A user's six nodes spread two per host;
 * `host drain` empties B onto A (C is full) and B is uncordoned again, empty; every process of C
 * killed: C's two nodes go down, open node_down incidents and migrate to B (spread: the user has
 * none there); B's link cut for longer than the fence timeout: its two chains stop by themselves
 * before their replacements start on A (sampled every 250 ms: never two chain processes for one
 * node), the link comes back and the old copies never start again; new nodes fill what room B
 * has left (the old copies' reservations are freed only if their removal reached B), and the full
 * fleet refuses one more with "no host with capacity in region test-1"; C's SSH host key changes
 * and C is refused.
 *
 * What other files prove in depth is only walked through here: the drain's API, stop and resume
 * (host-drain.test.ts), a full fleet's incident and notification (ssh-fleet.test.ts), a changed
 * key refused by `host add` (hosts-api.test.ts).
 *
 * Settings: heartbeat timeout 6 s, migration grace 3 s, fence 8 s (< 6 s + 3 s, the invariant the
 * health-evaluator enforces), agents heartbeat every 200 ms, an evaluation cycle and a host probe
 * every 250 ms (a host is unreachable after three failed probes in a row).
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, expect, it, onTestFailed } from 'vitest'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { moveHost } from '../../../src/hosts/service.js'
import { HostKeyMismatchError } from '../../../src/hosts/ssh-pool.js'
import { findNode, type NodeRecord } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { listRuns } from '../../../src/workflows/index.js'
import type { Dialect } from '../../helpers/db.js'
import { insertUser } from '../../helpers/fixtures.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { untilRunFinished, withDevnetBlockTime } from '../provisioning/harness.js'
import { prepareFleet, processesOf } from './fleet-harness.js'
import { onTheFleet, startFleetStack, type FleetStack } from './fleet-stack.js'

const INSTANCE_TYPE = 'test.devnet'
const GiB = 2 ** 30
const NEEDS = { cpu: 1, memory_bytes: GiB, disk_bytes: GiB }
// The agents' gateway runs in the test's process: on a loaded machine its event loop stalls for
// seconds at times, and an agent silent for the fence timeout less a quarter stops its chain.
const FENCE_MS = 8_000
const HEARTBEAT_TIMEOUT_MS = 6_000
const MIGRATION_GRACE_MS = 3_000

/** Every process in the namespace, killed at once (as a host that lost power: sshd included). */
function killEverything(netns: NetnsHost): void {
  const pids = execFileSync('ip', ['netns', 'pids', netns.namespace], { encoding: 'utf8' }).split(/\s+/).filter(Boolean).map(Number)
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // gone meanwhile
    }
  }
}

export function fleetJourneySuite(dialect: Dialect): void {
  let a: NetnsHost
  let b: NetnsHost
  let c: NetnsHost
  let stack: FleetStack
  const namespaces: NetnsHost[] = []
  const nodes: NodeRecord[] = []

  beforeAll(async () => {
    for (let i = 0; i < 3; i += 1) namespaces.push(await startNetnsHost())
    ;[a, b, c] = namespaces as [NetnsHost, NetnsHost, NetnsHost]
    // Agents dial the gateway on A's link; B and C reach it through their own.
    const files = await prepareFleet(namespaces, a.gatewayAddress)
    const catalogue = onTheFleet(withDevnetBlockTime(await loadChainCatalogue(defaultConfigDir()), 100), 'devnet', INSTANCE_TYPE)
    const capacity = (cpu: number) => ({ cpu, memory_bytes: 8 * GiB, disk_bytes: 8 * GiB })
    stack = await startFleetStack({
      dialect,
      hosts: [
        { name: 'host-a', netns: a, capacity: capacity(6) },
        { name: 'host-b', netns: b, capacity: capacity(2) },
        { name: 'host-c', netns: c, capacity: capacity(2) },
      ],
      files,
      catalogue,
      instanceTypes: { [INSTANCE_TYPE]: NEEDS },
      rpcPorts: { first: 10_000, last: 10_099 },
      fenceTimeoutMs: FENCE_MS,
      heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS,
      migrationGraceMs: MIGRATION_GRACE_MS,
      // The full fleet's provisioning waits this long for room before it fails.
      placementWaitMs: 3_000,
    })
  }, 120_000)

  afterAll(async () => {
    await b?.setLinkUp(true).catch(() => undefined)
    await stack?.stop()
    for (const host of namespaces) await host.stop()
  }, 120_000)

  // Where each node is and what its agent said about fencing and its chain, when a step failed.
  afterEach(async (context) => {
    if (context.task.result?.state !== 'fail' || !stack) return
    for (const n of nodes) {
      const row = await stack.db('nodes').where({ id: n.id }).first('state', 'sync_status', 'host_id')
      const dirs = namespaces.flatMap((netns) => fs.readdirSync(path.join(netns.rootDir, 'nodes')).filter((d) => d.startsWith(n.id)).map((d) => path.join(netns.rootDir, 'nodes', d)))
      const said = dirs.map((d) => {
        const log = path.join(d, 'agent.log')
        const lines = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter((l) => /fence|chain process|supersed|exited/i.test(l)).slice(-6) : ['(no agent.log)']
        return `${d}: ${lines.join(' | ').slice(0, 1_500)}`
      })
      console.log(`node ${n.id} ${JSON.stringify(row)} chains ${chainsOf(n.id).length}\n  ${said.join('\n  ')}`)
    }
  })

  const hostOf = async (nodeId: string) => stack.whereIs((await findNode(stack.db, nodeId)) as NodeRecord)
  const namesOf = async (ids: readonly string[]) => Promise.all(ids.map(async (id) => (await hostOf(id)).name))

  /** The chain processes of a node anywhere in the fleet (devnet-node run with a config in the node's directory). */
  const chainsOf = (nodeId: string): number[] =>
    namespaces.flatMap((netns) => processesOf(netns, `/nodes/${nodeId}`).filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('devnet.json')
      } catch {
        return false
      }
    }))

  const nodesOn = async (hostName: string) => {
    const on: Array<{ id: string; dir: string }> = []
    for (const n of nodes) {
      const where = await hostOf(n.id)
      if (where.name === hostName) on.push({ id: n.id, dir: where.dir })
    }
    return on
  }
  const hostRow = (name: string) => stack.db('hosts').where({ name }).first('id', 'state') as Promise<{ id: string; state: string }>
  /** No migrate run of these nodes is still going (the old host's removal included). */
  const migrationsFinished = async (ids: readonly string[]) =>
    (await stack.db('workflow_runs').where('workflow_name', 'migrate').whereNotIn('status', ['completed', 'failed']).where((q) => { for (const id of ids) void q.orWhere('workflow_key', 'like', `${id}:%`) }).select('id')).length === 0

  /** Reserved cpu per host never beyond its capacity. */
  const expectCapacityRespected = async () => {
    for (const { record } of stack.hosts.values()) {
      const used = (await stack.db('host_reservations').where({ host_id: record.id }).pluck('cpu')).map(Number).reduce((x, y) => x + y, 0)
      expect(used, record.name).toBeLessThanOrEqual(record.capacity.cpu)
    }
  }

  it("provisions a user's six nodes two per host (spread), each healthy on its host, capacity respected", async () => {
    const owner = await insertUser(stack.db)
    for (let i = 0; i < 6; i += 1) nodes.push(await stack.newNode('devnet', owner))
    const runs = await Promise.all(nodes.map(async (n) => untilRunFinished(stack.db, (await requestProvision(stack.db, n.id)).run.id, 180_000)))
    for (const r of runs) expect(r.status, JSON.stringify(r.error)).toBe('completed')
    for (const n of nodes) await stack.untilHealthy(n.id)
    const names = await namesOf(nodes.map((n) => n.id))
    expect(names.sort()).toEqual(['host-a', 'host-a', 'host-b', 'host-b', 'host-c', 'host-c'])
    for (const n of nodes) await waitFor(async () => chainsOf(n.id).length === 1, `one chain process of ${n.id}`, 30_000, 100)
    await expectCapacityRespected()
  }, 240_000)

  it('host drain empties host B onto A (C is full): its nodes healthy there, nothing of them left on B, B cordoned, then uncordoned', async () => {
    const onB = await nodesOn('host-b')
    expect(onB).toHaveLength(2)
    expect(await moveHost({ db: stack.db }, 'host-b', 'drain')).toMatchObject({ state: 'draining' })
    await waitFor(async () => (await hostRow('host-b')).state === 'cordoned', 'host B drained and cordoned', 120_000, 250)
    const drain = await stack.db('host_drains').where({ host_id: (await hostRow('host-b')).id }).first('status', 'nodes_moved')
    expect(drain).toMatchObject({ status: 'completed', nodes_moved: 2 })
    for (const n of onB) {
      await stack.untilHealthy(n.id)
      expect((await hostOf(n.id)).name).toBe('host-a')
      expect(chainsOf(n.id)).toHaveLength(1)
      expect(processesOf(b, n.id)).toEqual([])
    }
    expect(await stack.db('host_reservations').where({ host_id: (await hostRow('host-b')).id })).toEqual([])
    expect((await moveHost({ db: stack.db }, 'host-b', 'uncordon')).state).toBe('ready')
    await expectCapacityRespected()
  }, 180_000)

  it('every process of host C killed: its nodes go down, open incidents, and migrate to B, healthy there', async () => {
    const onC = (await nodesOn('host-c')).map((n) => n.id)
    expect(onC).toHaveLength(2)
    killEverything(c)
    await waitFor(async () => {
      const rows = await stack.db('incidents').whereIn('node_id', onC).where({ category: 'node_down' }).pluck('node_id')
      return new Set(rows).size === onC.length
    }, 'a node_down incident for each node of host C', 60_000, 100)
    for (const id of onC) {
      await waitFor(async () => (await findNode(stack.db, id))?.host_id?.startsWith((stack.hosts.get('host-c') as { record: { id: string } }).record.id) === false, `node ${id} to move off host C`, 120_000, 100)
      await stack.untilHealthy(id)
      expect(chainsOf(id)).toHaveLength(1)
    }
    // Spread: the user had no node left on B, and A holds four.
    expect(await namesOf(onC)).toEqual(['host-b', 'host-b'])
    // The probe found C gone: it takes nothing new.
    await waitFor(async () => (await stack.db('hosts').where({ name: 'host-c' }).first('state')).state === 'unreachable', 'host C unreachable', 30_000, 100)
    await expectCapacityRespected()
  }, 240_000)

  it("B's link cut past the fence timeout: its chains stop by themselves before their replacements start on A; back, the old copies never start again", async () => {
    const onB = await nodesOn('host-b')
    expect(onB).toHaveLength(2)
    onTestFailed(async () => {
      const runs = await stack.db('workflow_runs').where((q) => { for (const n of onB) void q.orWhere('workflow_key', 'like', `%${n.id}%`) }).where('workflow_name', 'migrate').select('id', 'workflow_name', 'status', 'current_step', 'error')
      console.log(JSON.stringify(runs, null, 1))
      for (const r of runs) console.log(JSON.stringify(await stack.db('workflow_steps').where({ run_id: r.id }).select('step_key', 'status', 'attempt', 'error')))
      console.log(JSON.stringify(await stack.db('nodes').whereIn('id', onB.map((n) => n.id)).select('id', 'state', 'host_id')))
      console.log(JSON.stringify(await stack.db('hosts').select('name', 'state', 'last_probe_result', 'last_probe_error')))
      console.log(JSON.stringify(await stack.db('host_reservations').select('host_id', 'node_id', 'cpu')))
    })
    // Every 250 ms, for the whole step: how many chain processes each node has.
    const samples: Array<{ at: number; counts: number[] }> = []
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        samples.push({ at: Date.now(), counts: onB.map((n) => chainsOf(n.id).length) })
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
    })()
    try {
      await b.setLinkUp(false)
      for (const n of onB) {
        await waitFor(async () => (await hostOf(n.id)).name === 'host-a', `node ${n.id} to move to host A`, 120_000, 100)
        await stack.untilHealthy(n.id)
      }
      await b.setLinkUp(true)
      // Back: each old agent is refused (its token was replaced), cleans up and exits for good.
      for (const n of onB) {
        await waitFor(async () => processesOf(b, path.basename(n.dir)).length === 0, `the old agent of ${n.id} on host B to be gone`, 60_000, 100)
      }
      // A few more samples with the old agents gone.
      const after = samples.length
      await waitFor(async () => samples.length >= after + 4, 'four more samples', 10_000, 50)
    } finally {
      sampling = false
      await sampler
    }
    // The cut-off agents were not asked for a backup: silent past the fence timeout, they could not answer.
    await waitFor(() => migrationsFinished(onB.map((n) => n.id)), "B's nodes' migrations to finish", 60_000, 100)
    for (const n of onB) {
      const runs = (await listRuns(stack.db, { name: 'migrate', limit: 500 })).filter((r) => r.workflowKey.startsWith(`${n.id}:`))
      const onA = (await findNode(stack.db, n.id))?.host_id
      const toA = runs.find((r) => (r.result as { host_id?: string } | null)?.host_id === onA)
      expect(toA, `${n.id}: ${JSON.stringify(runs)}`).toMatchObject({ status: 'completed', result: { outcome: 'migrated', backup: { taken: false, reason: expect.stringMatching(/silent for \d+ s, past the fence timeout/) } } })
    }
    for (const [i, n] of onB.entries()) {
      const counts = samples.map((s) => s.counts[i] as number)
      expect(Math.max(...counts), `node ${n.id}: two chain processes at once`).toBe(1)
      // The old chain stopped (a sample with none) before the new one ran: it never ran on two hosts.
      const firstNone = counts.indexOf(0)
      expect(firstNone, `node ${n.id} never without a chain`).toBeGreaterThan(0)
      expect(counts.at(-1)).toBe(1)
      expect(fs.existsSync(path.join(n.dir, 'state', 'chain.pid'))).toBe(false)
      expect(chainsOf(n.id)).toHaveLength(1)
      expect((await hostOf(n.id)).name).toBe('host-a')
    }
    await expectCapacityRespected()
  }, 300_000)

  it('the fleet filled up refuses a new node with "no host with capacity in region test-1", nothing made for it', async () => {
    // A holds six nodes, C is unreachable; B holds what the migrations could not remove while it
    // was cut off (removed once it answered again, or left reserved for the reconciler): new
    // nodes take whatever room is left.
    await waitFor(() => migrationsFinished(nodes.map((n) => n.id)), 'the migrations to finish', 90_000, 100)
    await waitFor(async () => (await hostRow('host-b')).state === 'ready', 'host B ready again', 30_000, 100)
    expect((await hostRow('host-c')).state).toBe('unreachable')
    const { record: onB } = stack.hosts.get('host-b') as NonNullable<ReturnType<FleetStack['hosts']['get']>>
    const room = onB.capacity.cpu - (await stack.db('host_reservations').where({ host_id: onB.id }).pluck('cpu')).map(Number).reduce((x, y) => x + y, 0)
    const fillers = await Promise.all(Array.from({ length: room }, () => stack.newNode('devnet')))
    const filled = await Promise.all(fillers.map(async (f) => untilRunFinished(stack.db, (await requestProvision(stack.db, f.id)).run.id, 120_000)))
    for (const r of filled) expect(r.status, JSON.stringify(r.error)).toBe('completed')
    for (const f of fillers) expect(stack.whereIs((await findNode(stack.db, f.id)) as NodeRecord).name).toBe('host-b')

    const node = await stack.newNode('devnet')
    const run = await untilRunFinished(stack.db, (await requestProvision(stack.db, node.id)).run.id, 60_000)
    expect(run.status).toBe('failed')
    expect(JSON.stringify(run.error)).toMatch(/no host with capacity in region test-1/)
    expect(await findNode(stack.db, node.id)).toMatchObject({ state: 'failed', host_id: null })
    expect(await stack.db('host_reservations').where({ node_id: node.id })).toEqual([])
    for (const netns of namespaces) expect(fs.existsSync(path.join(netns.rootDir, 'nodes', node.id))).toBe(false)
    await expectCapacityRespected()
  }, 120_000)

  it("host C's SSH host key changed: the control plane refuses it, naming both keys", async () => {
    const { record } = stack.hosts.get('host-c') as NonNullable<ReturnType<FleetStack['hosts']['get']>>
    const presented = await c.rotateHostKey()
    await waitFor(async () => (await stack.db('hosts').where({ id: record.id }).first('last_probe_result')).last_probe_result === 'host_key_mismatch', 'the probe to see the changed key', 30_000, 100)
    const row = await stack.db('hosts').where({ id: record.id }).first('state', 'last_probe_error')
    expect(row.state).toBe('unreachable')
    expect(row.last_probe_error).toContain(record.host_key_fingerprint)
    expect(row.last_probe_error).toContain(presented)
    const target = { id: record.id, address: record.address, port: record.port, user: record.user, privateKey: c.privateKey, hostKeyFingerprint: record.host_key_fingerprint }
    await expect(stack.pool.exec(target, 'true')).rejects.toBeInstanceOf(HostKeyMismatchError)
  }, 60_000)
}
