/**
 * The operator node commands that read and write the control-plane database, through the built
 * binary with `--json`, on both databases: `node show --wide` (the agent's report with the chain
 * pid, issue 22 item 8) and `node terminate --direct-db` (break-glass) on a paid subscription's node
 * (item 6); the same over the admin API is in operator-remote-commands.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { nodeplane, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertTestNode, setNodeState } from '../helpers/fixtures.js'

describe.each(DIALECTS)('operator node commands on %s', (dialect) => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T

  it('node show --wide prints the chain pid the agent reported, and refuses unknown and malformed ids', { timeout: 120_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    const run = (args: string[]) => nodeplane(args, { env: { DATABASE_URL: database!.url } })
    const node = await insertTestNode(db)
    const reportedAt = new Date('2026-11-01T10:00:00.000Z')
    await db('agent_status').insert({
      node_id: node.id,
      reported_at: reportedAt,
      agent_version: '0.1.0',
      binary_version: '1.0.0',
      sync_status: 'synced',
      process_state: 'running',
      restarts_in_window: 1,
      chain_pid: 48213,
      metrics: JSON.stringify({}),
      running_command_ids: JSON.stringify([]),
    })

    const wide = await run(['node', 'show', '--id', node.id, '--wide', '--json'])
    expect(wide.exitCode, wide.stderr).toBe(0)
    expect(json<Record<string, unknown>>(wide)).toMatchObject({
      id: node.id,
      state: 'provisioning',
      agent: { chain_pid: 48213, process_state: 'running', agent_version: '0.1.0', restarts_in_window: 1, reported_at: reportedAt.toISOString() },
    })
    const text = await run(['node', 'show', '--id', node.id.toUpperCase(), '--wide'])
    expect(text.exitCode, text.stderr).toBe(0)
    expect(text.stdout).toMatch(/chain pid: +48213\n/)

    const unknown = await run(['node', 'show', '--id', '00000000-0000-4000-8000-000000000000', '--wide'])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: no node 00000000-0000-4000-8000-000000000000 in the control-plane database\n/)
    const malformed = await run(['node', 'show', '--id', 'nope', '--wide', '--json'])
    expect(json<{ error: { name: string } }>(malformed).error.name).toBe('ValidationError')
  })

  it('node terminate refuses a paid subscription\'s live node (exit 4) and ends the subscription with --end-subscription', { timeout: 120_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    const run = (args: string[]) => nodeplane(args, { env: { DATABASE_URL: database!.url } })
    const node = await insertTestNode(db)
    await setNodeState(db, node.id, 'healthy')

    const refused = await run(['node', 'terminate', '--node', node.id, '--direct-db'])
    expect(refused.exitCode).toBe(4)
    expect(refused.stderr).toContain(`Error: node ${node.id} is the node of subscription ${node.subscription_id}, which is active`)
    expect(refused.stderr).toContain(`nodeplane node migrate --node ${node.id}`)
    expect(await db('workflow_runs').where({ workflow_key: node.id })).toEqual([])

    // Issue 20: without a terminal and without --yes a termination that would happen is refused
    // (exit 2, naming the node), nothing is started and the subscription stays; the id may be given
    // as the first argument, by a unique prefix (the database's prefix lookup).
    const unconfirmed = await run(['node', 'terminate', node.id.slice(0, 23), '--end-subscription', '--direct-db'])
    expect(unconfirmed.exitCode).toBe(2)
    expect(unconfirmed.stderr).toContain(`Error: refusing to terminate node ${node.id} (devnet full, healthy; subscription ${node.subscription_id} active) without --yes`)
    expect(unconfirmed.stderr).toContain('add --yes (-y) to confirm')
    expect(await db('workflow_runs').where({ workflow_key: node.id })).toEqual([])
    expect((await db('subscriptions').where({ id: node.subscription_id }).first('status')).status).toBe('active')

    const ended = await run(['node', 'terminate', node.id.slice(0, 23), '--reason', 'abuse report 1234', '--end-subscription', '--yes', '--direct-db', '--json'])
    expect(ended.exitCode, ended.stderr).toBe(0)
    expect(json<Record<string, unknown>>(ended)).toMatchObject({
      node_id: node.id,
      workflow: 'terminate',
      created: true,
      subscription_id: node.subscription_id,
      subscription_status: 'terminated',
      subscription_ended: true,
      other_nodes: [],
    })
    const sub = (await db('subscriptions').where({ id: node.subscription_id }).first('status', 'user_id')) as { status: string; user_id: string }
    expect(sub.status).toBe('terminated')
    expect(await db('notifications').where({ user_id: sub.user_id }).pluck('kind')).toEqual(['subscription_terminated'])

    const again = await run(['node', 'terminate', '--node', node.id, '--direct-db', '--json'])
    expect(again.exitCode, again.stderr).toBe(0)
    expect(json<Record<string, unknown>>(again)).toMatchObject({ created: false, subscription_ended: false, subscription_status: 'terminated' })
  })
})
