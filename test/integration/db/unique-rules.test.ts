/**
 * Every "at most one" rule of the specs is a unique index, so it holds even when two requests
 * race: a duplicate is rejected by the database, and the cases the rule allows still go in.
 */
import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { DatabaseName } from '../../../src/db/migrate.js'
import { createTestDatabase, DIALECTS, type Dialect, type TestDatabase } from '../../helpers/db.js'
import {
  expectViolation,
  insertApiKey,
  insertCustomer,
  insertIncident,
  insertNode,
  insertOutbox,
  insertPayment,
  insertRollout,
  insertRolloutGroup,
  insertRolloutNode,
  insertStateLog,
  insertSubscription,
  insertUser,
  insertWorkflowRun,
} from './support.js'

async function withDatabase(dialect: Dialect, database: DatabaseName, fn: (t: TestDatabase) => Promise<void>): Promise<void> {
  const t = await createTestDatabase(dialect, { database })
  try {
    await fn(t)
  } finally {
    await t.destroy()
  }
}

describe.each(DIALECTS)('unique rules on %s', (dialect) => {
  describe('control-plane database', () => {
    const cp = (fn: (t: TestDatabase) => Promise<void>) => () => withDatabase(dialect, 'control-plane', fn)

    it('one pending_payment subscription per user, chain profile, node type and duration', cp(async ({ db }) => {
      const user = await insertUser(db)
      const other = await insertUser(db)
      const first = await insertSubscription(db, user.id)
      await expectViolation(insertSubscription(db, user.id), 'unique')
      // Any differing part of the key is a different subscription.
      await insertSubscription(db, user.id, { duration: '3m' })
      await insertSubscription(db, user.id, { node_type: 'archive' })
      await insertSubscription(db, user.id, { chain_profile_id: 'polkadot' })
      await insertSubscription(db, other.id)
      // Once paid, the user may start another one for the same thing (a second node).
      await db('subscriptions').where({ id: first.id }).update({ status: 'active' })
      await insertSubscription(db, user.id)
      await insertSubscription(db, user.id, { status: 'active' })
      await expectViolation(insertSubscription(db, user.id), 'unique')
    }))

    it('one live node per subscription; a failed or terminated one can be replaced', cp(async ({ db }) => {
      const user = await insertUser(db)
      const sub = await insertSubscription(db, user.id, { status: 'active' })
      const first = await insertNode(db, sub.id, { state: 'healthy' })
      for (const state of ['provisioning', 'syncing', 'healthy', 'degraded', 'down', 'maintenance', 'terminating']) {
        await expectViolation(insertNode(db, sub.id, { state }), 'unique')
      }
      await db('nodes').where({ id: first.id }).update({ state: 'failed' })
      const second = await insertNode(db, sub.id)
      await db('nodes').where({ id: second.id }).update({ state: 'terminated' })
      await insertNode(db, sub.id)
      await insertNode(db, sub.id, { state: 'failed' })
      await insertNode(db, sub.id, { state: 'terminated' })
      const live = await db('nodes').where({ subscription_id: sub.id }).whereNotIn('state', ['terminated', 'failed']).count({ n: '*' })
      expect(Number(live[0]?.n)).toBe(1)
      await expectViolation(insertNode(db, sub.id, { state: 'syncing' }), 'unique')
    }))

    it('one unresolved incident per node and category; a new one once the old is resolved', cp(async ({ db }) => {
      const node = randomUUID()
      const first = await insertIncident(db, node, { category: 'node_down', status: 'open' })
      await expectViolation(insertIncident(db, node, { category: 'node_down', status: 'open' }), 'unique')
      await expectViolation(insertIncident(db, node, { category: 'node_down', status: 'acknowledged' }), 'unique')
      await insertIncident(db, node, { category: 'app_critical' })
      await insertIncident(db, randomUUID(), { category: 'node_down' })

      await db('incidents').where({ id: first.id }).update({ status: 'acknowledged' })
      await expectViolation(insertIncident(db, node, { category: 'node_down' }), 'unique')
      await db('incidents').where({ id: first.id }).update({ status: 'resolved' })
      const second = await insertIncident(db, node, { category: 'node_down' })
      await db('incidents').where({ id: second.id }).update({ status: 'auto_resolved' })
      await insertIncident(db, node, { category: 'node_down' })
      // Closed incidents pile up freely: they are history.
      await insertIncident(db, node, { category: 'node_down', status: 'resolved' })
      await insertIncident(db, node, { category: 'node_down', status: 'auto_resolved' })
    }))

    it('one pending, scheduled, running or paused rollout per chain profile', cp(async ({ db }) => {
      const active = ['pending', 'scheduled', 'running', 'paused']
      const first = await insertRollout(db, { status: 'running' })
      for (const status of active) await expectViolation(insertRollout(db, { status }), 'unique')
      await insertRollout(db, { chain_profile_id: 'polkadot', status: 'pending' })
      for (const status of ['completed', 'failed', 'cancelled', 'rolled_back']) await insertRollout(db, { status })

      await db('rollouts').where({ id: first.id }).update({ status: 'completed' })
      await insertRollout(db, { status: 'scheduled' })
      await expectViolation(insertRollout(db, { status: 'paused' }), 'unique')
    }))

    it('one pending, running or paused rollout group per chain profile', cp(async ({ db }) => {
      const first = await insertRolloutGroup(db, { status: 'paused' })
      for (const status of ['pending', 'running', 'paused']) await expectViolation(insertRolloutGroup(db, { status }), 'unique')
      await insertRolloutGroup(db, { chain_profile_id: 'polkadot' })
      for (const status of ['completed', 'partial', 'failed', 'cancelled', 'rolled_back']) await insertRolloutGroup(db, { status })

      await db('rollout_groups').where({ id: first.id }).update({ status: 'partial' })
      await insertRolloutGroup(db, { status: 'running' })
      await expectViolation(insertRolloutGroup(db, { status: 'pending' }), 'unique')
    }))

    it('a node appears once per rollout', cp(async ({ db }) => {
      const rollout = await insertRollout(db, { status: 'completed' })
      const later = await insertRollout(db, { status: 'running' })
      const node = randomUUID()
      await insertRolloutNode(db, rollout.id, node)
      await expectViolation(insertRolloutNode(db, rollout.id, node, { batch_index: 1 }), 'unique')
      await insertRolloutNode(db, rollout.id, randomUUID())
      await insertRolloutNode(db, later.id, node)
    }))

    it('user email is unique case-insensitively when present', cp(async ({ db }) => {
      await insertUser(db, { email: 'Ada@Example.com' })
      await expectViolation(insertUser(db, { email: 'Ada@Example.com' }), 'unique')
      await expectViolation(insertUser(db, { email: 'ada@example.COM' }), 'unique')
      await insertUser(db, { email: 'grace@example.com' })
      await insertUser(db, { email: null })
      await insertUser(db, { email: null })
    }))

    it('wallet address is unique case-insensitively (EIP-55 and lower case are one wallet)', cp(async ({ db }) => {
      const checksummed = '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed'
      await insertUser(db, { wallet_address: checksummed, wallet_type: 'ethereum' })
      await expectViolation(insertUser(db, { wallet_address: checksummed.toLowerCase(), wallet_type: 'ethereum' }), 'unique')
      await insertUser(db, { wallet_address: '0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359', wallet_type: 'ethereum' })
      // Users without a wallet: null address and type, as many as there are.
      await insertUser(db, { wallet_address: null })
      await insertUser(db, { wallet_address: null })
      // Solana base58 is case-sensitive: addresses differing only in case are different wallets.
      await insertUser(db, { wallet_address: '7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV', wallet_type: 'solana' })
      await insertUser(db, { wallet_address: '7ecDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV', wallet_type: 'solana' })
      await expectViolation(insertUser(db, { wallet_address: '7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV', wallet_type: 'solana' }), 'unique')
    }))

    it('external_auth_id is unique when present', cp(async ({ db }) => {
      await insertUser(db, { external_auth_id: 'user_2abc' })
      await expectViolation(insertUser(db, { external_auth_id: 'user_2abc' }), 'unique')
      await insertUser(db, { external_auth_id: 'user_2abd' })
      await insertUser(db, { external_auth_id: null })
      await insertUser(db, { external_auth_id: null })
    }))

    it('an API key hash is unique, even across users', cp(async ({ db }) => {
      const alice = await insertUser(db)
      const bob = await insertUser(db)
      const hash = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
      await insertApiKey(db, alice.id, { key_hash: hash })
      await expectViolation(insertApiKey(db, bob.id, { key_hash: hash }), 'unique')
      await expectViolation(insertApiKey(db, alice.id, { key_hash: hash, name: 'other' }), 'unique')
      await insertApiKey(db, alice.id)
    }))

    it('one open uptime state-log interval per node', cp(async ({ db }) => {
      const node = randomUUID()
      await insertStateLog(db, node, { state: 'provisioning' })
      await expectViolation(insertStateLog(db, node, { state: 'syncing' }), 'unique')
      await insertStateLog(db, randomUUID())
      // Closing the interval lets the next one open; closed intervals accumulate.
      await db('uptime_state_log').where({ node_id: node }).whereNull('exited_at').update({ exited_at: new Date() })
      await insertStateLog(db, node, { state: 'syncing' })
      await insertStateLog(db, node, { state: 'healthy', exited_at: new Date() })
      await expectViolation(insertStateLog(db, node, { state: 'healthy' }), 'unique')
    }))

    it('a workflow (name, key) is started once', cp(async ({ db }) => {
      const key = randomUUID()
      await insertWorkflowRun(db, { workflow_name: 'provision', workflow_key: key })
      await expectViolation(insertWorkflowRun(db, { workflow_name: 'provision', workflow_key: key, status: 'pending' }), 'unique')
      await insertWorkflowRun(db, { workflow_name: 'terminate', workflow_key: key })
      await insertWorkflowRun(db, { workflow_name: 'provision', workflow_key: randomUUID() })
    }))

    it('an outbox message id is stored once', cp(async ({ db }) => {
      const messageId = randomUUID()
      await insertOutbox(db, { message_id: messageId })
      await expectViolation(insertOutbox(db, { message_id: messageId, subject: 'events.rollout.x.started' }), 'unique')
      await insertOutbox(db)
    }))
  })

  describe('payments database', () => {
    const pay = (fn: (t: TestDatabase) => Promise<void>) => () => withDatabase(dialect, 'payments', fn)

    it('an idempotency key makes one payment per customer', pay(async ({ db }) => {
      const alice = await insertCustomer(db)
      const bob = await insertCustomer(db)
      await insertPayment(db, alice.id, { idempotency_key: 'checkout-1' })
      await expectViolation(insertPayment(db, alice.id, { idempotency_key: 'checkout-1', amount_minor: 9_900 }), 'unique')
      // Keys are the client's: another customer may pick the same one.
      await insertPayment(db, bob.id, { idempotency_key: 'checkout-1' })
      await insertPayment(db, alice.id, { idempotency_key: 'checkout-2' })
    }))

    it('a crypto memo identifies one payment; payments without a memo are unconstrained', pay(async ({ db }) => {
      const customer = await insertCustomer(db)
      const memo = `0x${'1f'.repeat(32)}`
      await insertPayment(db, customer.id, { crypto_memo: memo })
      await expectViolation(insertPayment(db, customer.id, { crypto_memo: memo }), 'unique')
      await insertPayment(db, customer.id, { crypto_memo: `0x${'2e'.repeat(32)}` })
      await insertPayment(db, customer.id, { method: 'card', crypto_memo: null })
      await insertPayment(db, customer.id, { method: 'card', crypto_memo: null })
    }))

    it('a provider reference identifies one payment per provider', pay(async ({ db }) => {
      const customer = await insertCustomer(db)
      await insertPayment(db, customer.id, { provider: 'card', method: 'card', provider_reference: 'cs_test_1' })
      await expectViolation(insertPayment(db, customer.id, { provider: 'card', method: 'card', provider_reference: 'cs_test_1' }), 'unique')
      await insertPayment(db, customer.id, { provider: 'test', provider_reference: 'cs_test_1' })
      await insertPayment(db, customer.id, { provider: 'card', method: 'card', provider_reference: null })
      await insertPayment(db, customer.id, { provider: 'card', method: 'card', provider_reference: null })
    }))

    it('an outbox message id is stored once', pay(async ({ db }) => {
      const messageId = randomUUID()
      await insertOutbox(db, { message_id: messageId })
      await expectViolation(insertOutbox(db, { message_id: messageId }), 'unique')
      await insertOutbox(db)
    }))
  })
})
