/**
 * Faults of the workers on the production shape (issue 9, "Faults survived"; the other cases are
 * in split-stack-faults.test.ts): one split stack (test/helpers/split-stack.ts, every daemon a
 * separate process, agents given both gateways) shared by sequential cases:
 *
 * 1b. the orchestrator running a node's provision killed -9 mid-run: the other orchestrator takes
 *     the run over when its lease runs out and finishes it on the same host: one host, no
 *     migration, the node healthy;
 * 1c. the health-evaluator holding the evaluation lease killed -9 while a dead node is being
 *     counted towards down: the other takes the lease over and carries on from the persisted
 *     counter: the node goes down once, one node_down incident, one migration, auto-resolved;
 * 4.  a canary rollout of two nodes (the second bought at the end of 1b, provisioned during 1c) in which the gateway of the upgrading agent and the
 *     orchestrator running the rollout are both killed -9 mid-upgrade: the agent finishes its
 *     upgrade through the other gateway, the surviving orchestrator finishes the rollout; each
 *     node received one upgrade command and runs the target;
 * 2b. NATS stopped for 22 s (longer than ten reconnect attempts) while a payment completes and a rollout runs and reports: the
 *     events wait in the outboxes; when NATS is back every one is in its stream once, in the order
 *     and with the content the database has, and the subscription activates once.
 *
 * After each case, expectNothingLostNothingTwice (test/helpers/split-stack-probe.ts).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { connect, type StoredMsg } from 'nats'
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest'
import { countUnpublished } from '../../src/events/outbox.js'
import { HEALTH_EVALUATION_JOB } from '../../src/health/evaluator.js'
import { MIGRATE_WORKFLOW } from '../../src/provisioning/migrate.js'
import { PROVISION_WORKFLOW } from '../../src/provisioning/provision.js'
import { ROLLOUT_WORKFLOW } from '../../src/rollouts/workflow-names.js'
import { binaryVersions } from '../integration/rollouts/harness.js'
import { jsonLogLines } from '../helpers/cli.js'
import { count } from '../helpers/payment-stack.js'
import { waitFor } from '../helpers/ports.js'
import { startSplitStack, type DaemonKind, type SplitStack, type SplitStackUser } from '../helpers/split-stack.js'
import { sleep, splitStackProbe, type SplitStackProbe } from '../helpers/split-stack-probe.js'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

interface Rollout {
  id: string
  status: string
  total_nodes: number
  succeeded_nodes: number
  failed_nodes: number
  error_message: string | null
  pause_reason: string | null
}

describe('worker faults survived on the split stack (separate daemon processes, Postgres, NATS)', () => {
  let stack: SplitStack
  let probe: SplitStackProbe
  const nodes: string[] = []
  let secondNode: Promise<string> = Promise.reject(new Error('case 1b did not buy the second node'))
  secondNode.catch(() => undefined)

  beforeAll(async () => {
    const t = Date.now()
    stack = await startSplitStack({ agentGateways: 'all', users: 1 })
    probe = splitStackProbe(stack, stack.users[0] as SplitStackUser, 'split-workers')
    process.stderr.write(`[split-workers] stack started in ${((Date.now() - t) / 1000).toFixed(1)}s\n`)
  }, 300_000)
  afterAll(async () => {
    await stack?.stop()
  }, 90_000)

  /** The instance of `kind` whose process holds a lease recorded as `<hostname>:<pid>:<nonce>`. */
  function instanceHolding(kind: DaemonKind, holder: string | null | undefined): string | undefined {
    const pid = Number(holder?.split(':')[1])
    return stack.namesOf(kind).find((name) => stack.instances.get(name)?.pid === pid)
  }
  async function runOf(name: string, key: string) {
    return (await stack.db('workflow_runs').where({ workflow_name: name, workflow_key: key }).first('id', 'status', 'current_step', 'lease_owner')) as
      | { id: string; status: string; current_step: string | null; lease_owner: string | null }
      | undefined
  }
  async function provisioned(): Promise<string> {
    const { subscriptionId, paymentId } = await probe.subscribeAndPay()
    await probe.waitActive(subscriptionId, paymentId)
    return probe.nodeOf(subscriptionId)
  }
  const adminKey = () => stack.admin.key
  async function startRollout(body: Record<string, unknown>): Promise<Rollout> {
    const rollout = await probe.ok<Rollout>('POST', '/api/v1/rollouts', body, 201, adminKey())
    await probe.ok('POST', `/api/v1/rollouts/${rollout.id}/start`, undefined, 200, adminKey())
    return rollout
  }
  async function rolloutDone(id: string, what: string, timeoutMs = 180_000): Promise<Rollout> {
    return waitFor(
      async () => {
        const current = await probe.ok<Rollout>('GET', `/api/v1/rollouts/${id}`, undefined, 200, adminKey())
        if (['failed', 'cancelled', 'rolled_back', 'paused'].includes(current.status)) throw new Error(`rollout ${current.status}: ${current.error_message ?? current.pause_reason}`)
        return current.status === 'completed' ? current : undefined
      },
      what,
      timeoutMs,
      500,
    )
  }

  it('1b: the orchestrator running a provision killed -9 mid-run: the other finishes it on the same host, no migration', { timeout: 300_000 }, async () => {
    onTestFailed(() => stack.printLogs())
    const nodeId = await provisioned()
    // Killed once the run has a host and waits on its agent (or configures it).
    const run = await waitFor(
      async () => {
        const r = await runOf(PROVISION_WORKFLOW, nodeId)
        // Step keys are `<name>#<occurrence>`.
        return r?.lease_owner && ['wait-for-agent', 'configure', 'inject-keys'].includes((r.current_step ?? '').replace(/#\d+$/, '')) ? r : undefined
      },
      'the provision run to wait on its agent',
      60_000,
      20,
    )
    const holder = instanceHolding('orchestrator', run.lease_owner)
    expect(holder, `lease owner ${run.lease_owner}`).toBeDefined()
    await stack.kill(holder as string, 'SIGKILL')
    probe.mark(`${holder} killed at step ${run.current_step}`)

    await probe.waitHealthy(nodeId, 'the node to be healthy after the other orchestrator finished its provision')
    // The operator's trail (issue 22, item 5): the survivor logged which run it took over, from whom.
    const survivor = stack.namesOf('orchestrator').find((name) => name !== holder) as string
    const takeovers = jsonLogLines(stack.log(survivor)).filter((l) => l.msg === 'took over an interrupted workflow run' && l.workflowId === run.id)
    expect(takeovers).toEqual([expect.objectContaining({ level: 'warn', workflow: PROVISION_WORKFLOW, previous_owner: run.lease_owner, interrupted_ms: expect.any(Number) })])
    const after = await runOf(PROVISION_WORKFLOW, nodeId)
    expect(after?.status).toBe('completed')
    expect(instanceHolding('orchestrator', after?.lease_owner)).toBeUndefined()
    // Same host, never migrated, one agent registration per token: the survivor did not start over.
    expect(probe.hosts()).toEqual([`local-${nodeId}`])
    expect(await count(stack.db, 'workflow_runs', { workflow_name: MIGRATE_WORKFLOW })).toBe(0)
    const moves = (await stack.db('uptime_state_log').where({ node_id: nodeId }).orderBy('id').pluck('state')) as string[]
    expect(moves).not.toContain('down')
    await stack.restart(holder as string)
    // The agent kept its stream: its heartbeats go on arriving, and the node stays healthy.
    const restartedAt = Date.now()
    await waitFor(
      async () => {
        const row = (await stack.db('nodes').where({ id: nodeId }).first('last_heartbeat')) as { last_heartbeat: Date | string | null }
        return row.last_heartbeat !== null && new Date(row.last_heartbeat).getTime() > restartedAt + 2_000 ? true : undefined
      },
      'heartbeats after the restart',
      30_000,
      200,
    )
    expect((await probe.nodeRow(nodeId)).state).toBe('healthy')
    nodes.push(nodeId)
    await probe.expectNothingLostNothingTwice('1b')
    // Case 4's second node, bought now: it provisions while case 1c waits on the evaluators.
    secondNode = provisioned()
    secondNode.catch(() => undefined)
  })

  it('1c: the health-evaluator holding the evaluation lease killed -9 while a dead node is counted: one down, one incident, one migration', { timeout: 300_000 }, async () => {
    onTestFailed(() => stack.printLogs())
    const nodeId = nodes[0] as string
    const lease = (await stack.db('job_leases').where({ name: HEALTH_EVALUATION_JOB }).first('holder')) as { holder: string } | undefined
    const holder = instanceHolding('health-evaluator', lease?.holder)
    expect(holder, `lease holder ${lease?.holder}`).toBeDefined()

    // The host dies (its agent's process group), then the evaluator counting it is killed.
    const record = JSON.parse(fs.readFileSync(path.join(probe.hostOf(nodeId), 'host.json'), 'utf8')) as { pid: number }
    process.kill(-record.pid, 'SIGKILL')
    await waitFor(async () => Number(((await stack.db('nodes').where({ id: nodeId }).first('consecutive_failures')) as { consecutive_failures: number }).consecutive_failures) > 0, 'the node counted once', 60_000, 100)
    await stack.kill(holder as string, 'SIGKILL')
    probe.mark(`${holder} killed while counting`)

    // Until the other evaluator takes the lease the node still reads healthy (the one killed may
    // not have got to its policies either): wait for the down first.
    await waitFor(
      async () => ((await stack.db('uptime_state_log').where({ node_id: nodeId, state: 'down' }).first('id')) as { id: number } | undefined),
      'the node down, counted on by the other evaluator',
      240_000,
      250,
    )
    await probe.waitHealthy(nodeId, 'the node migrated and healthy again', 240_000)
    const next = (await stack.db('job_leases').where({ name: HEALTH_EVALUATION_JOB }).first('holder')) as { holder: string }
    const successor = instanceHolding('health-evaluator', next.holder)
    expect(successor).not.toBe(holder)
    // The operator's trail (issue 22, item 5): the takeover, from whom, and the new holder's summary line.
    const trail = jsonLogLines(stack.log(successor as string)).filter((l) => l.job === HEALTH_EVALUATION_JOB || l.msg === 'health evaluation summary')
    expect(trail.filter((l) => l.msg === 'took over the job lease from a holder that stopped renewing it')).toEqual([
      expect.objectContaining({ level: 'warn', previous_holder: lease?.holder, without_holder_ms: expect.any(Number) }),
    ])
    expect(trail.some((l) => l.msg === 'health evaluation summary')).toBe(true)
    const states = (await stack.db('uptime_state_log').where({ node_id: nodeId }).orderBy('id').pluck('state')) as string[]
    expect(states.filter((s) => s === 'down')).toHaveLength(1)
    // Migration runs are keyed `<node id>:<trigger time>`: one trigger, one run.
    expect(await stack.db('workflow_runs').where({ workflow_name: MIGRATE_WORKFLOW }).whereLike('workflow_key', `${nodeId}:%`).pluck('status')).toEqual(['completed'])
    expect(probe.hosts().filter((h) => h.startsWith(`local-${nodeId}`))).toEqual([expect.stringMatching(new RegExp(`^local-${nodeId}-m\\d+$`))])
    const incidents = await waitFor(
      async () => {
        // Only node_down: an app_* incident while the new host's chain catches up is not this case's.
        const rows = (await stack.db('incidents').where({ node_id: nodeId, category: 'node_down' }).select('category', 'status', 'occurrence_count')) as Array<{ category: string; status: string; occurrence_count: number }>
        return rows.length === 1 && rows[0]?.status === 'auto_resolved' ? rows : undefined
      },
      'one node_down incident, auto-resolved',
      180_000,
      250,
    )
    expect(incidents[0]).toMatchObject({ category: 'node_down' })
    expect(Number(incidents[0]?.occurrence_count)).toBe(1)
    await stack.restart(holder as string)
    // Case 4's node, provisioned meanwhile, has its one host too.
    await probe.waitHealthy(await secondNode, 'the second node healthy')
    await probe.expectNothingLostNothingTwice('1c')
  })

  it('4: gateway and orchestrator killed -9 mid-upgrade: the agent finishes through the other gateway, the other orchestrator finishes the rollout', { timeout: 420_000 }, async () => {
    onTestFailed(() => stack.printLogs())
    nodes.push(await secondNode)
    for (const id of nodes) await probe.waitHealthy(id, `node ${id} healthy before the rollout`)
    const rollout = await startRollout({
      upgrade_id: 'devnet-1.1.0',
      chain_profile_id: 'devnet',
      node_type: 'full',
      source_version: '1.0.0',
      strategy: 'canary',
      canary_size: 1,
      batch_size: 1,
      health_wait_duration: '3s',
      reason: 'split-stack worker faults',
    })
    // The canary's upgrade in flight on its agent.
    const upgrading = await waitFor(
      async () => {
        const row = (await stack.db('rollout_nodes').where({ rollout_id: rollout.id, status: 'in_progress' }).whereNotNull('upgrade_phase').first('node_id', 'upgrade_phase')) as
          | { node_id: string; upgrade_phase: string }
          | undefined
        return row
      },
      'an upgrade in flight',
      90_000,
      20,
    )
    const gateway = probe.gatewayOfAgent(upgrading.node_id) as string
    const run = await runOf(ROLLOUT_WORKFLOW, rollout.id)
    const orchestrator = instanceHolding('orchestrator', run?.lease_owner)
    expect(gateway).toBeDefined()
    expect(orchestrator, `rollout run lease owner ${run?.lease_owner}`).toBeDefined()
    await Promise.all([stack.kill(gateway, 'SIGKILL'), stack.kill(orchestrator as string, 'SIGKILL')])
    probe.mark(`${gateway} and ${orchestrator} killed with ${upgrading.node_id} at ${upgrading.upgrade_phase}`)

    const done = await rolloutDone(rollout.id, 'the rollout to complete on the survivors')
    expect(done).toMatchObject({ total_nodes: 2, succeeded_nodes: 2, failed_nodes: 0 })
    expect(probe.gatewayOfAgent(upgrading.node_id)).not.toBe(gateway)
    for (const id of nodes) {
      expect(await binaryVersions(stack.db, [id])).toEqual(['1.1.0'])
      expect(await count(stack.db, 'agent_commands', { node_id: id, type: 'upgrade' }), `upgrade commands of ${id}`).toBe(1)
    }
    await Promise.all([stack.restart(gateway), stack.restart(orchestrator as string)])
    for (const id of nodes) await probe.waitHealthy(id, `node ${id} healthy on 1.1.0`)
    await probe.expectNothingLostNothingTwice('4')
  })

  it('2b: NATS stopped for longer than ten reconnect attempts while a payment completes and a rollout reports: every event delivered once, as the database has it', { timeout: 420_000 }, async () => {
    onTestFailed(() => stack.printLogs())
    // Longer than a NATS client's default ten reconnect attempts take with the daemons' settings
    // (each after the 1 s reconnect wait plus up to 1 s of TLS jitter: 20 s at most), so a client
    // that gave up after them would show here: the daemons keep trying.
    const OUTAGE_MS = 22_000
    await stack.nats.stop()
    const stoppedAt = Date.now()
    probe.mark('NATS stopped')
    const release = path.join(REPO, 'chains/devnet/releases/devnet-node-1.0.0.mjs')
    const rollout = await startRollout({
      chain_profile_id: 'devnet',
      node_type: 'full',
      source_version: '1.1.0',
      binary_name: 'devnet-node',
      target_version: '1.0.0',
      target_binary_url: pathToFileURL(release).href,
      target_binary_checksum: `sha256:${crypto.createHash('sha256').update(fs.readFileSync(release)).digest('hex')}`,
      strategy: 'rolling',
      batch_size: 1,
      health_wait_duration: '3s',
      reason: 'back to 1.0.0 with NATS away',
    })
    const { subscriptionId, paymentId } = await probe.subscribeAndPay()
    await waitFor(async () => (await probe.paymentStatus(paymentId)) === 'completed', 'the payment to complete in the payments database', 30_000, 200)
    // The rollout runs without the bus: its state lives in the database, its events in the outbox.
    const done = await rolloutDone(rollout.id, 'the rollout to complete with NATS away', Math.max(120_000, OUTAGE_MS - (Date.now() - stoppedAt)))
    expect(done).toMatchObject({ total_nodes: 2, succeeded_nodes: 2 })
    expect(await countUnpublished(stack.db)).toBeGreaterThan(0)
    expect(await countUnpublished(stack.paymentsDb)).toBeGreaterThan(0)
    await sleep(Math.max(0, OUTAGE_MS - (Date.now() - stoppedAt)))
    expect((await probe.subscriptionRow(subscriptionId)).status).toBe('pending_payment')

    await stack.nats.start()
    probe.mark('NATS started')
    await probe.waitActive(subscriptionId, paymentId, 90_000)
    await waitFor(async () => (await countUnpublished(stack.paymentsDb)) === 0 && (await countUnpublished(stack.db)) === 0, 'both outboxes published', 90_000, 250)

    // The rollout's events in the stream: each once, in the outbox's order, with its payload.
    const expected = (await stack.db('outbox').whereLike('subject', `events.rollout.${rollout.id}.%`).orderBy('id').select('subject', 'payload', 'message_id')) as Array<{
      subject: string
      payload: unknown
      message_id: string
    }>
    expect(expected.map((e) => e.subject.split('.').at(-1))).toEqual(expect.arrayContaining(['started', 'completed']))
    const nc = await connect({ servers: stack.nats.url, ...stack.nats.connectionFor('operator') })
    try {
      // Read back from the stream itself (message by message: Debian's nats-server predates
      // consumers with several filter subjects).
      const jsm = await nc.jetstreamManager()
      const stream = await jsm.streams.find(`events.rollout.${rollout.id}.started`)
      const { state } = await jsm.streams.info(stream)
      const seen: StoredMsg[] = []
      for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined)
        if (m?.subject.startsWith(`events.rollout.${rollout.id}.`)) seen.push(m)
      }
      expect(seen.map((m) => m.subject)).toEqual(expected.map((e) => e.subject))
      expect(seen.map((m) => m.header.get('Nats-Msg-Id'))).toEqual(expected.map((e) => e.message_id))
      expect(seen.map((m) => m.json())).toEqual(expected.map((e) => (typeof e.payload === 'string' ? JSON.parse(e.payload) : e.payload)))
    } finally {
      await nc.close()
    }
    expect(await binaryVersions(stack.db, nodes)).toEqual(nodes.map(() => '1.0.0'))
    const nodeC = await probe.nodeOf(subscriptionId)
    await probe.waitHealthy(nodeC, 'the node bought during the outage healthy')
    await probe.expectNothingLostNothingTwice('2b')
  })
})
