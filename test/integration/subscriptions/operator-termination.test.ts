/**
 * `node terminate` as an operator (issue 22, item 6; docs/subscriptions.md, "Operator
 * termination") on both databases: the live node of a paid subscription is never terminated
 * alone; with endSubscription the subscription ends with it and the customer is notified.
 */
import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../../../src/errors.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { TERMINATE_WORKFLOW } from '../../../src/provisioning/terminate.js'
import { terminateNodeAsOperator } from '../../../src/subscriptions/operator-termination.js'
import type { SubscriptionStatus } from '../../../src/subscriptions/views.js'
import { findRunByKey } from '../../../src/workflows/index.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertUser, setNodeState } from '../../helpers/fixtures.js'

const T0 = new Date('2026-05-01T00:00:00.000Z')

describe.each(DIALECTS)('operator node termination on %s', (dialect) => {
  let t: TestDatabase | undefined
  afterEach(async () => {
    await t?.destroy()
    t = undefined
  })

  async function setup(status: SubscriptionStatus, nodeStates: string[]): Promise<{ db: Db; userId: string; subscriptionId: string; nodes: string[] }> {
    t = await createTestDatabase(dialect)
    const db = t.db
    const userId = await insertUser(db, T0)
    const subscriptionId = crypto.randomUUID()
    await db('subscriptions').insert({
      id: subscriptionId,
      user_id: userId,
      chain_profile_id: 'devnet',
      node_type: 'full',
      duration: '1m',
      provider: 'local',
      region: 'local',
      instance_type: 'process',
      status,
      expires_at: new Date(T0.getTime() + 30 * 86_400_000),
      grace_period_expires_at: status === 'expiring' ? new Date(T0.getTime() + 86_400_000) : null,
      created_at: T0,
      updated_at: T0,
    })
    const nodes: string[] = []
    for (const [i, state] of nodeStates.entries()) {
      const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date(T0.getTime() + i * 1000))
      await setNodeState(db, node.id, state)
      nodes.push(node.id)
    }
    // A secret the customer gave: it dies with the subscription.
    await db('provisioning_inputs').insert({ id: crypto.randomUUID(), subscription_id: subscriptionId, name: 'validator_key', type: 'secret', phase: 'provision', sealed_value: Buffer.from('sealed'), status: 'pending', created_at: T0, updated_at: T0 })
    return { db, userId, subscriptionId, nodes }
  }

  const statusOf = async (db: Db, id: string) => ((await db('subscriptions').where({ id }).first('status')) as { status: string }).status
  const notices = async (db: Db, userId: string) => (await db('notifications').where({ user_id: userId }).select('kind', 'body')) as Array<{ kind: string; body: string }>

  it('refuses to terminate the live node of an active subscription alone, saying what to do, and changes nothing', async () => {
    const { db, userId, subscriptionId, nodes } = await setup('active', ['healthy'])
    const nodeId = nodes[0]!
    const refused = await terminateNodeAsOperator(db, { nodeId, reason: 'abuse report', endSubscription: false }).catch((err: unknown) => err)
    expect(refused).toBeInstanceOf(ConflictError)
    expect((refused as ConflictError).message).toBe(
      `node ${nodeId} is the node of subscription ${subscriptionId}, which is active: terminating it alone would leave the customer paying for no node`,
    )
    expect((refused as ConflictError).details).toContain(`nodeplane node migrate --node ${nodeId}`)
    expect((refused as ConflictError).details).toContain('--end-subscription')
    expect(await findRunByKey(db, TERMINATE_WORKFLOW, nodeId)).toBeNull()
    expect(await statusOf(db, subscriptionId)).toBe('active')
    expect(await notices(db, userId)).toEqual([])
    expect(await db('provisioning_inputs').where({ subscription_id: subscriptionId })).toHaveLength(1)
  })

  it('with endSubscription ends the subscription, starts the termination and notifies the customer, in one go; again it answers the same run', async () => {
    const { db, userId, subscriptionId, nodes } = await setup('active', ['healthy'])
    const nodeId = nodes[0]!
    const ended = await terminateNodeAsOperator(db, { nodeId, reason: 'abuse report 1234', endSubscription: true, now: T0 })
    expect(ended).toMatchObject({ created: true, subscription_id: subscriptionId, subscription_status: 'terminated', subscription_ended: true, other_nodes: [] })
    expect(ended.run).toMatchObject({ workflowName: TERMINATE_WORKFLOW, workflowKey: nodeId, input: { nodeId, reason: 'abuse report 1234' } })
    expect(await statusOf(db, subscriptionId)).toBe('terminated')
    const sent = await notices(db, userId)
    expect(sent).toHaveLength(1)
    expect(sent[0]?.kind).toBe('subscription_terminated')
    expect(sent[0]?.body).toContain('abuse report 1234')
    expect(await db('provisioning_inputs').where({ subscription_id: subscriptionId })).toEqual([])

    const again = await terminateNodeAsOperator(db, { nodeId, reason: 'again', endSubscription: true })
    expect(again).toMatchObject({ created: false, subscription_status: 'terminated', subscription_ended: false })
    expect(again.run.id).toBe(ended.run.id)
    expect(await notices(db, userId)).toHaveLength(1)
  })

  it('ends an expiring subscription too, starting the termination of every node of it not yet terminated', async () => {
    const { db, subscriptionId, nodes } = await setup('expiring', ['failed', 'terminated', 'healthy'])
    const [failed, terminated, live] = nodes as [string, string, string]
    const ended = await terminateNodeAsOperator(db, { nodeId: live, reason: 'customer asked', endSubscription: true })
    expect(ended).toMatchObject({ created: true, subscription_status: 'terminated', subscription_ended: true, other_nodes: [failed] })
    expect(await findRunByKey(db, TERMINATE_WORKFLOW, failed)).not.toBeNull()
    expect(await findRunByKey(db, TERMINATE_WORKFLOW, terminated)).toBeNull()
    expect(await statusOf(db, subscriptionId)).toBe('terminated')
  })

  it('terminates without the flag what leaves no paid subscription empty: a failed node, or a node of a terminated subscription', async () => {
    const active = await setup('active', ['failed'])
    const cleanup = await terminateNodeAsOperator(active.db, { nodeId: active.nodes[0]!, reason: 'clean up', endSubscription: false })
    expect(cleanup).toMatchObject({ created: true, subscription_status: 'active', subscription_ended: false })
    expect(await statusOf(active.db, active.subscriptionId)).toBe('active')
    await t?.destroy()

    const over = await setup('terminated', ['healthy'])
    expect(await terminateNodeAsOperator(over.db, { nodeId: over.nodes[0]!, reason: 'left over', endSubscription: false })).toMatchObject({ created: true, subscription_status: 'terminated' })
  })

  it('answers a malformed id with a validation error and an unknown one with not found', async () => {
    const { db } = await setup('active', [])
    await expect(terminateNodeAsOperator(db, { nodeId: 'not-a-node', reason: 'x', endSubscription: true })).rejects.toThrow(ValidationError)
    await expect(terminateNodeAsOperator(db, { nodeId: crypto.randomUUID(), reason: 'x', endSubscription: true })).rejects.toThrow(NotFoundError)
  })
})
