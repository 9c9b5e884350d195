import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Writable } from 'node:stream'
import pino from 'pino'
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { getProfile } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { toDateOrNull } from '../../../src/db/dialect.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { requestProvision, requestTermination, type LifecycleDeps } from '../../../src/provisioning/index.js'
import type { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import { createDataKey, loadDataKey } from '../../../src/secrets/data-keys.js'
import type { MasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKey, listNodeKeys } from '../../../src/secrets/node-keys.js'
import { sealBlob } from '../../../src/secrets/sealed-blob.js'
import { activeServerPublicKey } from '../../../src/secrets/server-key.js'
import { getRun, NonRetryableStepError, type WorkflowRun, type WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { otherCa, type RunningGateway } from '../agent-gateway/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished } from './harness.js'

// A CA that did not sign the gateway's certificate, made once for the file: each one is a key
// pair made in JavaScript (a second or two of CPU), and any other CA is refused the same way.
let wrongCa: Buffer | undefined
const aWrongCa = (): Buffer => (wrongCa ??= otherCa())

// The two dialects' cases at the same time, each with a database, gateway, hosts directory and
// worker of its own: much of the time here is agents starting and chains syncing.
describeEachDialectConcurrently('node lifecycle workflows on the local provider on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway
  let provider: LocalInfrastructureProvider
  let deps: LifecycleDeps
  let worker: WorkflowWorker
  let root: string
  let masterKey: MasterKey
  // Everything the orchestrator side logs, to check no key material reaches a log.
  const logged: string[] = []
  const logger = pino({ level: 'debug' }, new Writable({ write: (chunk: Buffer, _enc, done) => (logged.push(chunk.toString('utf8')), done()) }))

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    // Blocks every 100 ms, not 500: the chain's sync is shorter.
    ;({ gateway, provider, deps, root, masterKey } = await lifecycleSetting(db, { logger, devnetBlockTimeMs: 100 }))
    worker = startLifecycleWorker(db, deps)
  })
  afterEach(async () => {
    for (const host of fs.readdirSync(root)) await provider.destroyHost(host)
  })
  afterAll(async () => {
    await worker.stop()
    await gateway.stop()
    await t.destroy()
  })

  const finished = (runId: string, timeoutMs?: number): Promise<WorkflowRun> => untilRunFinished(db, runId, timeoutMs)

  it('provisions a node end to end (host, agent, configure, start, syncing) and terminates it (host gone, token revoked)', async () => {
    const node = await insertTestNode(db)
    // A user-provided secret, sealed by the client to the server key (the spec's blob layout).
    const userKey = crypto.randomBytes(32).toString('hex')
    const server = await activeServerPublicKey(db)
    const blob = sealBlob(Buffer.from(userKey), Buffer.from(server!.public_key, 'base64'))
    const now = new Date()
    await db('provisioning_inputs').insert({
      id: crypto.randomUUID(), subscription_id: node.subscription_id, name: 'fee_recipient_key', type: 'secret', phase: 'pre_provision', source: 'user_provided',
      key_type: 'secp256k1', value: null, sealed_value: Buffer.from(blob), status: 'pending', created_at: now, updated_at: now,
    })
    const started = await requestProvision(db, node.id)
    expect(started.created).toBe(true)
    // Idempotent: the same node's provision is the same run.
    const again = await requestProvision(db, node.id)
    expect(again).toMatchObject({ created: false, run: { id: started.run.id } })

    const run = await finished(started.run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({
      node_id: node.id,
      outcome: 'provisioned',
      binary_version: '1.0.0',
      keys: { generated: ['validator_key'], user_provided: ['fee_recipient_key'], injected: ['fee_recipient_key', 'validator_key'], captured: ['nodekey'] },
    })
    // Keys: stored under the node's data key, injected sealed, captured sealed; nothing in plaintext in the database.
    const stored = await listNodeKeys(db, node.id)
    expect(stored.map((k) => [k.name, k.key_type, k.source]).sort()).toEqual([
      ['fee_recipient_key', 'secp256k1', 'user_provided'],
      ['nodekey', 'opaque', 'chain_generated'],
      ['validator_key', 'ed25519', 'generated'],
    ])
    const dataKey = await loadDataKey(db, masterKey, node.id)
    const hostKeys = path.join(root, `local-${node.id}`, 'state', 'keys')
    expect(fs.readFileSync(path.join(hostKeys, 'fee_recipient_key'), 'utf8').trim()).toBe(userKey)
    expect(fs.statSync(path.join(hostKeys, 'validator_key')).mode & 0o777).toBe(0o600)
    expect(fs.readFileSync(path.join(hostKeys, 'validator_key'), 'utf8').trim()).toBe((await decryptNodeKey(db, dataKey, 'validator_key')).toString('hex'))
    expect((await decryptNodeKey(db, dataKey, 'nodekey')).toString('utf8')).toBe(fs.readFileSync(path.join(root, `local-${node.id}`, 'state', 'data', 'nodekey'), 'utf8'))
    const everything = JSON.stringify([await db('agent_commands').where({ node_id: node.id }), await db('workflow_steps').where({ run_id: started.run.id })])
    expect(everything).not.toContain(userKey)
    const agentLog = fs.readFileSync(path.join(root, `local-${node.id}`, 'agent.log'), 'utf8')
    const validatorHex = (await decryptNodeKey(db, dataKey, 'validator_key')).toString('hex')
    for (const text of [logged.join(''), agentLog]) {
      expect(text.length).toBeGreaterThan(0)
      expect(text).not.toContain(userKey)
      expect(text).not.toContain(validatorHex)
    }
    expect(everything).not.toContain((await decryptNodeKey(db, dataKey, 'validator_key')).toString('hex'))
    expect((await db('provisioning_inputs').where({ subscription_id: node.subscription_id }).first()).status).toBe('applied')
    const provisioned = await findNode(db, node.id)
    expect(provisioned).toMatchObject({ state: 'syncing', provider: 'local', host_ip: '127.0.0.1', region: 'local', instance_type: 'process' })
    expect(provisioned?.host_id).toBe(`local-${node.id}`)
    expect(await db('node_config_state').where({ node_id: node.id }).first()).toMatchObject({ binary_version: '1.0.0' })
    expect(await findRegistration(db, node.id)).toBeDefined()
    expect(fs.readdirSync(root)).toEqual([`local-${node.id}`])
    // The chain runs and the probe reports through heartbeats.
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'sync_status synced', 30_000, 100)

    const termination = await requestTermination(db, node.id, 'test')
    const terminated = await finished(termination.run.id)
    expect(terminated.status, terminated.error ?? '').toBe('completed')
    expect(terminated.result).toEqual({ node_id: node.id, outcome: 'terminated', skipped_steps: [] })
    expect(await findNode(db, node.id)).toMatchObject({ state: 'terminated', sync_status: 'unknown', application_health: 'unknown' })
    expect(fs.readdirSync(root)).toEqual([])
    // Keys and the data key are gone: nothing the system holds can decrypt the node's keys any more.
    expect(await db('node_keys').where({ node_id: node.id })).toEqual([])
    expect(await db('node_data_keys').where({ node_id: node.id })).toEqual([])
    // The user's secret, still sealed to the server key, is gone with them.
    expect(await db('provisioning_inputs').where({ subscription_id: node.subscription_id })).toEqual([])
    const token = await db('agent_tokens').where({ node_id: node.id }).first()
    expect(toDateOrNull(token.revoked_at)).not.toBeNull()
    // A second termination request finds the same run.
    expect((await requestTermination(db, node.id, 'again')).created).toBe(false)
  })

  it('a node whose agent never registers ends failed with its host destroyed and its token revoked', async () => {
    await worker.stop()
    const node = await insertTestNode(db)
    // The agent can never register (it does not trust the gateway): the wait only has to run out.
    const shortWait: LifecycleDeps = { ...deps, agentReadyWaitMs: 1_000, agentBootstrap: { ...deps.agentBootstrap, caPem: aWrongCa().toString() } }
    const isolated = startLifecycleWorker(db, shortWait, 1)
    try {
      const started = await requestProvision(db, node.id)
      const run = await finished(started.run.id)
      expect(run.status).toBe('failed')
      expect(run.error).toMatch(/did not register within 2 s|did not register within 1 s/)
    } finally {
      await isolated.stop()
      worker = startLifecycleWorker(db, deps)
    }
    expect((await findNode(db, node.id))?.state).toBe('failed')
    expect(fs.readdirSync(root)).toEqual([])
    expect(toDateOrNull((await db('agent_tokens').where({ node_id: node.id }).first()).revoked_at)).not.toBeNull()
  })

  it('a failure at every provisioning step ends failed, with no host, no key and no usable token left', { timeout: 120_000 }, async () => {
    const steps = ['validate-inputs', 'generate-keys', 'create-infrastructure', 'wait-for-agent', 'configure', 'inject-keys', 'start', 'capture-keys', 'mark-inputs-applied', 'mark-syncing']
    const faults = new Map<string, string>()
    const faulty: LifecycleDeps = {
      ...deps,
      injectFault: (step, nodeId) => {
        // Failed for good: the compensation is under test here, the retries in the engine's tests.
        if (faults.get(nodeId) === step) throw new NonRetryableStepError(`injected failure at ${step}`)
      },
    }
    const nodes: { id: string; step: string; runId: string }[] = []
    await worker.stop()
    for (const step of steps) {
      const node = await insertTestNode(db)
      faults.set(node.id, step)
      nodes.push({ id: node.id, step, runId: (await requestProvision(db, node.id)).run.id })
    }
    const isolated = startLifecycleWorker(db, faulty, steps.length)
    try {
      for (const node of nodes) {
        const run = await finished(node.runId)
        expect(run.status, `${node.step}: ${run.error ?? ''}`).toBe('failed')
        expect(run.error).toContain(`injected failure at ${node.step}`)
      }
    } finally {
      await isolated.stop()
      worker = startLifecycleWorker(db, deps)
    }
    for (const node of nodes) {
      expect((await findNode(db, node.id))?.state, node.step).toBe('failed')
      expect(fs.existsSync(path.join(root, `local-${node.id}`)), node.step).toBe(false)
      expect(await db('node_keys').where({ node_id: node.id }), node.step).toEqual([])
      expect(await db('node_data_keys').where({ node_id: node.id }), node.step).toEqual([])
      const token = await db('agent_tokens').where({ node_id: node.id }).first()
      if (token) expect(toDateOrNull(token.revoked_at), node.step).not.toBeNull()
    }
  })

  it('a node missing a required input ends failed before any host or key is made', async () => {
    const node = await insertTestNode(db)
    const devnet = getProfile(deps.chains.current(), 'devnet')
    const strict = { ...devnet, inputs: devnet.inputs.map((i) => (i.name === 'operator_label' ? { ...i, required: true } : i)) }
    const strictDeps: LifecycleDeps = { ...deps, chains: staticChainSource({ ...deps.chains.current(), profiles: new Map([['devnet', strict]]) }) }
    const isolated = startLifecycleWorker(db, strictDeps, 1)
    await worker.stop()
    try {
      const run = await finished((await requestProvision(db, node.id)).run.id)
      expect(run.status).toBe('failed')
      expect(run.error).toContain('required inputs missing: operator_label')
    } finally {
      await isolated.stop()
      worker = startLifecycleWorker(db, deps)
    }
    expect((await findNode(db, node.id))?.state).toBe('failed')
    expect(fs.readdirSync(root)).toEqual([])
    expect(await db('node_data_keys').where({ node_id: node.id })).toEqual([])
  })

  it('a node placed on a provider that does not exist ends failed without a host', async () => {
    const node = await insertTestNode(db)
    await db('nodes').where({ id: node.id }).update({ provider: 'nowhere' })
    const run = await finished((await requestProvision(db, node.id)).run.id)
    expect(run.status).toBe('failed')
    expect(run.error).toContain('no infrastructure provider "nowhere"')
    expect((await findNode(db, node.id))?.state).toBe('failed')
    expect(fs.readdirSync(root)).toEqual([])
  })

  it('termination with failing middle steps still ends terminated, and says which steps were skipped', async () => {
    const node = await insertTestNode(db)
    await db('nodes').where({ id: node.id }).update({ state: 'healthy', provider: 'nowhere', host_id: 'vm-123' })
    const run = await finished((await requestTermination(db, node.id, 'test')).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    const result = run.result as { outcome: string; skipped_steps: { step: string; error: string }[] }
    expect(result.outcome).toBe('terminated')
    expect(result.skipped_steps.map((s) => s.step)).toEqual(['destroy-infrastructure', 'verify-cleanup'])
    expect(result.skipped_steps[0]?.error).toContain('no infrastructure provider "nowhere"')
    expect((await findNode(db, node.id))?.state).toBe('terminated')
  })

  it('terminating a failed node removes what it still holds (host, keys) and leaves it failed', async () => {
    const node = await insertTestNode(db)
    const host = await provider.createHost({
      nodeId: node.id, hostKey: `${node.id}-m1`, chainProfileId: 'devnet', nodeType: 'full', region: 'local', instanceType: 'local.small',
      agent: { ...deps.agentBootstrap, token: await createAgentToken(db, node.id) },
    })
    await createDataKey(db, masterKey, node.id)
    // The subscription may be provisioned again: the secrets its user gave stay for that.
    const now = new Date()
    await db('provisioning_inputs').insert({
      id: crypto.randomUUID(), subscription_id: node.subscription_id, name: 'fee_recipient_key', type: 'secret', phase: 'pre_provision', source: 'user_provided',
      key_type: 'secp256k1', value: null, sealed_value: crypto.randomBytes(120), status: 'pending', created_at: now, updated_at: now,
    })
    await db('nodes').where({ id: node.id }).update({ state: 'failed', provider: 'local', host_id: host.host_id })
    const run = await finished((await requestTermination(db, node.id, 'cleanup')).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toEqual({ node_id: node.id, outcome: 'cleaned_up', skipped_steps: [] })
    expect((await findNode(db, node.id))?.state).toBe('failed')
    expect(fs.existsSync(provider.hostDir(host.host_id))).toBe(false)
    expect(await db('node_data_keys').where({ node_id: node.id })).toEqual([])
    expect(await db('provisioning_inputs').where({ subscription_id: node.subscription_id }).pluck('name')).toEqual(['fee_recipient_key'])
  })

  it('provisioning a node that is not in state provisioning is skipped, and unknown nodes are refused', async () => {
    const node = await insertTestNode(db)
    await db('nodes').where({ id: node.id }).update({ state: 'healthy' })
    const run = await finished((await requestProvision(db, node.id)).run.id)
    expect(run.result).toMatchObject({ outcome: 'skipped', reason: 'node is healthy, not provisioning' })
    await expect(requestProvision(db, '0190f5c2-0000-7000-8000-000000000000')).rejects.toThrow(/not found/)
    await expect(requestProvision(db, 'not-a-uuid')).rejects.toThrow(/not a node id/)
  })
})
