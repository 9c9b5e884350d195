/**
 * Creating rollouts and groups on both databases (src/rollouts/create.ts): auto mode from the
 * shipped devnet manifest, manual mode, every 400 of the spec's request tables (nothing
 * written), defaults, the one-active rules as 409 under concurrent creation, and groups
 * resolved from manifests and chain releases.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { loadChainCatalogue, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { ConflictError, ValidationError } from '../../../src/errors.js'
import { componentRollout, createRollout, createRolloutGroup, type CreateOptions } from '../../../src/rollouts/create.js'
import { getRollout, getRolloutGroup, insertRollout, updateGroupStatus } from '../../../src/rollouts/store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { tempDir } from '../../helpers/cli.js'
import { at, CHECKSUM_110, T0 } from './helpers.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const release110Url = pathToFileURL(path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.1.0.mjs')).href
const manifestHash = `sha256:${createHash('sha256').update(fs.readFileSync(path.join(repoRoot, 'upgrades/devnet/devnet-1.1.0.yaml'))).digest('hex')}`
const OPERATOR = '00000000-0000-4000-8000-0000000000aa'

let catalogue: ChainCatalogue
beforeAll(async () => {
  catalogue = await loadChainCatalogue(repoRoot)
})

const open: TestDatabase[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.destroy()))
})

async function fresh(dialect: (typeof DIALECTS)[number]): Promise<TestDatabase> {
  const t = await createTestDatabase(dialect)
  open.push(t)
  return t
}

/**
 * One database per dialect for the requests refused with a 400: each of them writes nothing (each
 * test checks the table is still empty), so they need no fresh database of their own. A fresh
 * Postgres database (a clone of the template, then dropped) costs about half a second, which was
 * nearly all of each of those tests' time.
 */
const untouched = new Map<string, Promise<TestDatabase>>()
function untouchedDatabase(dialect: (typeof DIALECTS)[number]): Promise<TestDatabase> {
  let t = untouched.get(dialect)
  if (!t) {
    t = createTestDatabase(dialect)
    untouched.set(dialect, t)
  }
  return t
}
afterAll(async () => {
  await Promise.all([...untouched.values()].map(async (t) => (await t).destroy()))
  untouched.clear()
})

/**
 * Postgres: a pool per writer, so the creations really race. SQLite: the one handle a process has
 * (better-sqlite3 is synchronous: a second connection in the same process waiting on the write
 * lock would block the thread that holds it).
 */
function concurrentHandle(t: TestDatabase): Db {
  return t.dialect === 'postgres' ? t.connect() : t.db
}

// Free artifact URLs are refused unless under an allowed source (artifact-sources.test.ts); these tests are about the rest.
const options = (): CreateOptions => ({ createdBy: OPERATOR, catalogue, now: T0, artifactSources: ['https://releases.example.test/'] })

const AUTO = { upgrade_id: 'devnet-1.1.0', chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' }
const MANUAL = {
  chain_profile_id: 'devnet',
  node_type: 'full',
  source_version: '1.0.0',
  binary_name: 'devnet-node',
  target_version: '1.1.0',
  target_binary_url: 'https://releases.example.test/devnet-node-1.1.0.mjs',
  target_binary_checksum: CHECKSUM_110,
}
const GROUP = { chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'partial_ok', component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }] }

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (err: unknown) => err,
  )
}

async function count(db: Db, table: string): Promise<number> {
  const row = (await db(table).count({ n: '*' }).first()) as { n: unknown }
  return Number(row.n)
}

describe.each(DIALECTS)('creating rollouts on %s', (dialect) => {
  it('auto mode: the manifest fills binary, target, checksum, migration_type, recovery plan, config changes, compatibility and the content hash; defaults apply', async () => {
    const { db } = await fresh(dialect)
    const rollout = await createRollout(db, AUTO, options())
    expect(rollout).toMatchObject({
      status: 'pending',
      upgrade_id: 'devnet-1.1.0',
      chain_profile_id: 'devnet',
      node_type: 'full',
      source_version: '1.0.0',
      binary_name: 'devnet-node',
      target_version: '1.1.0',
      target_binary_url: release110Url,
      target_binary_checksum: CHECKSUM_110,
      migration_type: 'non_breaking',
      manifest_content_hash: manifestHash,
      strategy: 'rolling',
      batch_size: 10,
      canary_size: null,
      failure_threshold: 0.2,
      health_wait_duration_ms: 300_000,
      created_by: OPERATOR,
      group_id: null,
      scheduled_at: null,
      version: 1,
      created_at: T0,
    })
    expect(rollout.manifest?.state_compatibility).toEqual({ compatible_source_versions: ['1.0.0'] })
    expect(rollout.manifest?.config_changes?.config_version).toBe('devnet-1.1.0')
    expect(rollout.manifest?.recovery_plan).toContain('backup')
    expect(await getRollout(db, rollout.id)).toEqual(rollout)
  })

  it('auto mode accepts fields that agree with the manifest and refuses each one that disagrees', async () => {
    const { db } = await fresh(dialect)
    const disagreeing: [string, unknown][] = [
      ['binary_name', 'other-node'],
      ['target_version', '1.2.0'],
      ['target_binary_url', 'https://releases.example.test/devnet-node-1.1.0.mjs'],
      ['target_binary_checksum', `sha256:${'b'.repeat(64)}`],
      ['migration_type', 'breaking'],
    ]
    for (const [field, value] of disagreeing) {
      const err = await rejection(createRollout(db, { ...AUTO, [field]: value }, options()))
      expect(err, field).toBeInstanceOf(ValidationError)
      expect((err as ValidationError).details, field).toContain(`body.${field}: "${String(value)}" disagrees with upgrade devnet-1.1.0`)
    }
    const incompatible = await rejection(createRollout(db, { ...AUTO, source_version: '0.9.0' }, options()))
    expect((incompatible as ValidationError).details).toBe('body.source_version: upgrade devnet-1.1.0 applies to 1.0.0, not 0.9.0')
    // A manifest for a source the nodes could not go back to: no release, no rollout installed it.
    const dir = tempDir()
    fs.mkdirSync(path.join(dir, 'upgrades', 'devnet'), { recursive: true })
    const manifest = fs.readFileSync(path.join(repoRoot, 'upgrades/devnet/devnet-1.1.0.yaml'), 'utf8')
    fs.writeFileSync(
      path.join(dir, 'upgrades/devnet/from-105.yaml'),
      manifest.replace(/^artifact: .*$/m, `artifact: ${release110Url}`).replace('compatible_source_versions: ["1.0.0"]', 'compatible_source_versions: ["1.0.5"]'),
    )
    const noWayBack = await rejection(createRollout(db, { ...AUTO, upgrade_id: 'from-105', source_version: '1.0.5' }, { ...options(), configDir: dir }))
    expect((noWayBack as ValidationError).details).toBe(
      'body.source_version: chain devnet has no release 1.0.5 (releases: 1.0.0, 1.1.0) and no rollout installed it; the nodes must be able to go back to the source version',
    )
    const missing = await rejection(createRollout(db, { ...AUTO, upgrade_id: 'devnet-9.9.9' }, options()))
    expect((missing as ValidationError).message).toBe('no upgrade manifest upgrades/devnet/devnet-9.9.9.yaml')
    expect(await count(db, 'rollouts')).toBe(0)

    const agreeing = await createRollout(
      db,
      { ...AUTO, binary_name: 'devnet-node', target_version: '1.1.0', target_binary_url: release110Url, target_binary_checksum: CHECKSUM_110.toUpperCase().replace('SHA256', 'sha256'), migration_type: 'non_breaking' },
      options(),
    )
    expect(agreeing).toMatchObject({ target_binary_checksum: CHECKSUM_110, manifest_content_hash: manifestHash })
  })

  it('manual mode: the caller gives binary and target; tuning and schedule are taken as given', async () => {
    const { db } = await fresh(dialect)
    const rollout = await createRollout(
      db,
      { ...MANUAL, target_binary_checksum: `sha256:${'AB'.repeat(32)}`, strategy: 'canary', batch_size: 25, failure_threshold: 0, health_wait_duration: '1h30m', reason: 'hard fork', migration_type: 'breaking' },
      options(),
    )
    expect(rollout).toMatchObject({
      upgrade_id: null,
      manifest: null,
      manifest_content_hash: null,
      migration_type: 'breaking',
      target_binary_checksum: `sha256:${'ab'.repeat(32)}`,
      strategy: 'canary',
      canary_size: 1,
      batch_size: 25,
      failure_threshold: 0,
      health_wait_duration_ms: 5_400_000,
      reason: 'hard fork',
      scheduled_at: null,
    })
    const equalToNow = await rejection(createRollout(db, { ...MANUAL, chain_profile_id: 'devnet', scheduled_at: '2025-03-01T13:00:00+01:00' }, options()))
    expect((equalToNow as ValidationError).details).toContain('is not in the future')
  })

  it('manual mode: source_version must be a release of the chain profile (the version a failed node or a rollback goes back to)', async () => {
    const { db } = await fresh(dialect)
    const unknown = await rejection(createRollout(db, { ...MANUAL, source_version: '0.9.0', target_version: '1.2.0' }, options()))
    expect(unknown).toBeInstanceOf(ValidationError)
    expect((unknown as ValidationError).message).toBe('invalid request')
    expect((unknown as ValidationError).details).toBe(
      'body.source_version: chain devnet has no release 0.9.0 (releases: 1.0.0, 1.1.0) and no rollout installed it; the nodes must be able to go back to the source version',
    )
    expect(await count(db, 'rollouts')).toBe(0)
    // Listed with the other problems of the same request, in one 400.
    const several = await rejection(createRollout(db, { ...MANUAL, source_version: '2.0.0', target_version: '2.0.0' }, options()))
    expect((several as ValidationError).details).toMatch(/^body\.source_version: chain devnet has no release 2\.0\.0 .*; body\.source_version: equals the target version 2\.0\.0; nothing to upgrade$/)
    // A release as the source, any target version (manual mode is how an unlisted build is rolled out).
    const rollout = await createRollout(db, { ...MANUAL, source_version: '1.1.0', target_version: '1.2.0-rc.1' }, options())
    expect(rollout).toMatchObject({ source_version: '1.1.0', target_version: '1.2.0-rc.1', upgrade_id: null })
  })

  const bad: [string, Record<string, unknown>, string][] = [
    ['no chain_profile_id', { ...MANUAL, chain_profile_id: undefined }, 'body.chain_profile_id: Required'],
    ['an unknown chain profile', { ...MANUAL, chain_profile_id: 'nochain' }, 'body.chain_profile_id: unknown chain profile "nochain"'],
    ['an unknown node type', { ...MANUAL, node_type: 'validator' }, 'body.node_type: chain devnet has no node type "validator"'],
    ['no node_type', { ...MANUAL, node_type: undefined }, 'body.node_type: Required'],
    ['no source_version', { ...MANUAL, source_version: undefined }, 'body.source_version: Required'],
    ['a numeric source_version', { ...MANUAL, source_version: 1 }, 'body.source_version: must be a string'],
    ['source equal to target', { ...MANUAL, source_version: '1.1.0' }, 'body.source_version: equals the target version 1.1.0'],
    ['a manual source_version the chain has no release of', { ...MANUAL, source_version: '0.9.0' }, 'body.source_version: chain devnet has no release 0.9.0 (releases: 1.0.0, 1.1.0)'],
    ['manual without binary_name', { ...MANUAL, binary_name: undefined }, 'body.binary_name: is required in manual mode'],
    ['manual without target_version', { ...MANUAL, target_version: undefined }, 'body.target_version: is required in manual mode'],
    // Without a URL, binary, version and checksum name a stored artifact: no store in these options.
    ['manual without target_binary_url and no artifact store', { ...MANUAL, target_binary_url: undefined }, 'body.target_binary_checksum: artifact not found: this server has no artifact store configured'],
    ['manual without target_binary_checksum', { ...MANUAL, target_binary_checksum: undefined }, 'body.target_binary_checksum: is required in manual mode'],
    ['a bare hex checksum', { ...MANUAL, target_binary_checksum: CHECKSUM_110.slice(7) }, 'body.target_binary_checksum: must be sha256:<64 hex digits>'],
    ['a short checksum', { ...MANUAL, target_binary_checksum: 'sha256:abc' }, 'body.target_binary_checksum: must be sha256:<64 hex digits>'],
    ['an md5 checksum', { ...MANUAL, target_binary_checksum: `md5:${'a'.repeat(32)}` }, 'body.target_binary_checksum: must be sha256'],
    ['a relative URL', { ...MANUAL, target_binary_url: 'releases/x.mjs' }, 'body.target_binary_url: must be an absolute URL'],
    ['an ftp URL', { ...MANUAL, target_binary_url: 'ftp://example.test/x' }, 'body.target_binary_url: must be an http://, https:// or file:// URL'],
    ['a binary name with a slash', { ...MANUAL, binary_name: '../bin' }, 'body.binary_name: must be letters, digits'],
    ['a binary the nodes do not run', { ...MANUAL, binary_name: 'sidecar' }, "body.binary_name: devnet's nodes run one binary, devnet-node; sidecar is not it"],
    ['an unknown strategy', { ...MANUAL, strategy: 'blue_green' }, 'body.strategy: Invalid enum value'],
    ['batch_size 0', { ...MANUAL, batch_size: 0 }, 'body.batch_size: must be at least 1'],
    ['a fractional batch_size', { ...MANUAL, batch_size: 2.5 }, 'body.batch_size: must be a whole number'],
    ['a string batch_size', { ...MANUAL, batch_size: '10' }, 'body.batch_size: must be a whole number'],
    ['a negative canary_size', { ...MANUAL, strategy: 'canary', canary_size: -1 }, 'body.canary_size: must be at least 1'],
    ['canary_size without canary', { ...MANUAL, canary_size: 2 }, 'body.canary_size: applies to the canary strategy only (strategy is rolling)'],
    ['failure_threshold above 1', { ...MANUAL, failure_threshold: 1.01 }, 'body.failure_threshold: must be between 0.0 and 1.0'],
    ['failure_threshold below 0', { ...MANUAL, failure_threshold: -0.1 }, 'body.failure_threshold: must be between 0.0 and 1.0'],
    ['failure_threshold as text', { ...MANUAL, failure_threshold: '0.5' }, 'body.failure_threshold: Expected number'],
    ['a duration without unit', { ...MANUAL, health_wait_duration: '300' }, 'body.health_wait_duration: must be a duration such as 30s, 5m or 1h30m'],
    ['a duration in words', { ...MANUAL, health_wait_duration: 'five minutes' }, 'body.health_wait_duration: must be a duration'],
    ['a duration as a number', { ...MANUAL, health_wait_duration: 300000 }, 'body.health_wait_duration: Expected string'],
    ['a zero duration', { ...MANUAL, health_wait_duration: '0s' }, 'body.health_wait_duration: must be between 1s and 24h'],
    ['a duration over a day', { ...MANUAL, health_wait_duration: '25h' }, 'body.health_wait_duration: must be between 1s and 24h'],
    ['an unknown migration_type', { ...MANUAL, migration_type: 'major' }, 'body.migration_type: Invalid enum value'],
    ['a scheduled_at in the past', { ...MANUAL, scheduled_at: '2025-03-01T11:59:59Z' }, 'body.scheduled_at: 2025-03-01T11:59:59Z is not in the future'],
    ['a scheduled_at that is not a time', { ...MANUAL, scheduled_at: 'tomorrow' }, 'body.scheduled_at: must be an ISO 8601 date-time'],
    ['an unknown field', { ...MANUAL, batches: 3 }, "Unrecognized key(s) in object: 'batches'"],
    ['an upgrade id with a path', { ...AUTO, upgrade_id: '../devnet/devnet-1.1.0' }, 'body.upgrade_id: must be a upgrade id'],
    ['an empty upgrade id', { ...AUTO, upgrade_id: '' }, 'body.upgrade_id: String must contain at least 1'],
    ['a body that is not an object', [] as unknown as Record<string, unknown>, 'body: Expected object, received array'],
  ]
  it.each(bad)('answers 400 for %s and writes nothing', async (_name, body, expected) => {
    const { db } = await untouchedDatabase(dialect)
    const err = await rejection(createRollout(db, body, options()))
    expect(err).toBeInstanceOf(ValidationError)
    expect((err as ValidationError).details).toContain(expected)
    expect(await count(db, 'rollouts')).toBe(0)
  })

  it('keeps a future scheduled_at, and the canary default of one node', async () => {
    const { db } = await fresh(dialect)
    const rollout = await createRollout(db, { ...AUTO, scheduled_at: '2025-03-01T14:00:00+01:00', strategy: 'canary' }, options())
    expect(rollout).toMatchObject({ scheduled_at: at(3_600_000), status: 'pending', strategy: 'canary', canary_size: 1 })
  })

  it('at most one active rollout per chain: of 8 concurrent creations one succeeds, seven get a 409 naming it', async () => {
    const t = await fresh(dialect)
    const pools = Array.from({ length: 8 }, () => concurrentHandle(t))
    const results = await Promise.allSettled(pools.map((db) => createRollout(db, AUTO, options())))
    const created = results.filter((r): r is PromiseFulfilledResult<Awaited<ReturnType<typeof createRollout>>> => r.status === 'fulfilled')
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    expect(created).toHaveLength(1)
    expect(refused).toHaveLength(7)
    const winner = created[0]?.value.id
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(ConflictError)
      expect((r.reason as ConflictError).message).toBe(`chain devnet already has an active rollout (${winner}, pending)`)
    }
    expect(await count(t.db, 'rollouts')).toBe(1)
  })

  it('refuses a rollout while a group is active on the chain, and a group while a rollout is', async () => {
    const { db } = await fresh(dialect)
    const group = await createRolloutGroup(db, GROUP, options())
    const err = await rejection(createRollout(db, AUTO, options()))
    expect(err).toBeInstanceOf(ConflictError)
    expect((err as ConflictError).message).toBe(`chain devnet has an active rollout group (${group.id}, pending)`)
    await updateGroupStatus(db, group.id, 'cancelled', { now: at(1) })
    const rollout = await createRollout(db, AUTO, options())
    const groupErr = await rejection(createRolloutGroup(db, GROUP, options()))
    expect(groupErr).toBeInstanceOf(ConflictError)
    expect((groupErr as ConflictError).message).toBe(`chain devnet has an active rollout (${rollout.id}, pending)`)
    expect(await count(db, 'rollout_groups')).toBe(1)
  })
})

describe.each(DIALECTS)('creating rollout groups on %s', (dialect) => {
  it('takes the chain\'s binary more than once: one component per node type (or version), with a gate between', async () => {
    const { db } = await fresh(dialect)
    const group = await createRolloutGroup(
      db,
      { ...GROUP, component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }, { binary_name: 'devnet-node', node_type: 'archive', version: '1.1.0' }] },
      options(),
    )
    expect(group.component_order.map((c) => [c.binary_name, c.node_type, c.version])).toEqual([['devnet-node', 'full', '1.1.0'], ['devnet-node', 'archive', '1.1.0']])
    expect(group.desired_versions).toEqual({ 'devnet-node': '1.1.0' })
  })

  it('resolves components from a manifest or the chain release, derives desired_versions, applies defaults', async () => {
    const { db } = await fresh(dialect)
    const group = await createRolloutGroup(
      db,
      { ...GROUP, failure_policy: 'rollback_all', component_order: [{ upgrade_id: 'devnet-1.1.0-breaking', binary_name: 'devnet-node', node_type: 'archive', version: '1.1.0' }], strategy: 'canary', health_wait_duration: '30s' },
      options(),
    )
    expect(group).toMatchObject({
      status: 'pending',
      failure_policy: 'rollback_all',
      desired_versions: { 'devnet-node': '1.1.0' },
      strategy: 'canary',
      canary_size: 1,
      batch_size: 10,
      failure_threshold: 0.2,
      health_wait_duration_ms: 30_000,
      created_by: OPERATOR,
      current_component_index: null,
    })
    expect(group.component_order).toEqual([
      {
        binary_name: 'devnet-node',
        node_type: 'archive',
        version: '1.1.0',
        url: release110Url,
        checksum: CHECKSUM_110,
        upgrade_id: 'devnet-1.1.0-breaking',
        migration_type: 'breaking',
        manifest_content_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        manifest: expect.objectContaining({ recovery_plan: expect.stringContaining('canary') }),
      },
    ])
    expect(await getRolloutGroup(db, group.id)).toEqual(group)
    // Creating a group creates no rollout: the group workflow does, per component.
    expect(await count(db, 'rollouts')).toBe(0)

    // The group workflow's rollout for a component carries the group's tuning and the component's target.
    await updateGroupStatus(db, group.id, 'cancelled', { now: at(1) })
    const release = await createRolloutGroup(db, { ...GROUP, desired_versions: { 'devnet-node': '1.1.0' } }, options())
    expect(release.component_order[0]).toMatchObject({ upgrade_id: null, url: release110Url, checksum: CHECKSUM_110, migration_type: 'non_breaking', manifest: null })
    const component = await insertRollout(db, componentRollout(release, 0, { sourceVersion: '1.0.0' }), at(2))
    expect(component).toMatchObject({ group_id: release.id, component_index: 0, target_version: '1.1.0', target_binary_url: release110Url, strategy: 'rolling', created_by: OPERATOR })
  })

  const bad: [string, Record<string, unknown>, string][] = [
    ['no failure_policy', { ...GROUP, failure_policy: undefined }, 'body.failure_policy: is required: partial_ok, rollback_all or manual (there is no default)'],
    ['an unknown failure_policy', { ...GROUP, failure_policy: 'retry' }, 'body.failure_policy: Invalid enum value'],
    ['no components', { ...GROUP, component_order: [] }, 'body.component_order: must list at least one component'],
    ['a component without version', { ...GROUP, component_order: [{ binary_name: 'devnet-node', node_type: 'full' }] }, 'body.component_order[0].version: Required'],
    ['a component with an unknown node type', { ...GROUP, component_order: [{ binary_name: 'devnet-node', node_type: 'light', version: '1.1.0' }] }, 'body.component_order[0].node_type: chain devnet has no node type "light"'],
    ['a version the chain has no release of', { ...GROUP, component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '2.0.0' }] }, 'body.component_order[0].version: chain devnet has no release 2.0.0'],
    ['another binary', { ...GROUP, component_order: [{ binary_name: 'sidecar', node_type: 'full', version: '1.0.0' }] }, "body.component_order[0].binary_name: devnet's nodes run one binary, devnet-node; sidecar is not it"],
    ['a missing manifest', { ...GROUP, component_order: [{ upgrade_id: 'nope', binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }] }, 'body.component_order[0].upgrade_id: upgrade_id: no file'],
    ['a manifest for another version', { ...GROUP, component_order: [{ upgrade_id: 'devnet-1.1.0', binary_name: 'devnet-node', node_type: 'full', version: '1.2.0' }] }, 'body.component_order[0].version: upgrade devnet-1.1.0 targets 1.1.0, not 1.2.0'],
    ['a manifest for another binary', { ...GROUP, component_order: [{ upgrade_id: 'devnet-1.1.0', binary_name: 'sidecar', node_type: 'full', version: '1.1.0' }] }, "body.component_order[0].binary_name: devnet's nodes run one binary, devnet-node; sidecar is not it"],
    ['a binary twice', { ...GROUP, component_order: [GROUP.component_order[0], GROUP.component_order[0]] }, 'body.component_order[1]: devnet-node 1.1.0 for full nodes is listed twice'],
    ['desired_versions disagreeing', { ...GROUP, desired_versions: { 'devnet-node': '1.0.0' } }, 'body.desired_versions.devnet-node: 1.0.0, but its component upgrades to 1.1.0'],
    ['desired_versions naming another binary', { ...GROUP, desired_versions: { 'devnet-node': '1.1.0', sidecar: '2.0.0' } }, 'body.desired_versions.sidecar: no component upgrades sidecar'],
    ['desired_versions lacking a component', { ...GROUP, desired_versions: {} }, 'body.desired_versions: lacks devnet-node'],
    ['an unknown chain', { ...GROUP, chain_profile_id: 'nochain' }, 'body.chain_profile_id: unknown chain profile'],
    ['an unknown group node type', { ...GROUP, node_type: 'light' }, 'body.node_type: chain devnet has no node type "light"'],
    ['batch_size 0', { ...GROUP, batch_size: 0 }, 'body.batch_size: must be at least 1'],
    ['canary_size without canary', { ...GROUP, canary_size: 3 }, 'body.canary_size: applies to the canary strategy only'],
    ['an unknown field', { ...GROUP, source_version: '1.0.0' }, "Unrecognized key(s) in object: 'source_version'"],
  ]
  it.each(bad)('answers 400 for %s and writes nothing', async (_name, body, expected) => {
    const { db } = await untouchedDatabase(dialect)
    const err = await rejection(createRolloutGroup(db, body, options()))
    expect(err).toBeInstanceOf(ValidationError)
    expect((err as ValidationError).details).toContain(expected)
    expect(await count(db, 'rollout_groups')).toBe(0)
  })

  it('at most one active group per chain: concurrent creations give one group and 409s', async () => {
    const t = await fresh(dialect)
    const results = await Promise.allSettled(Array.from({ length: 4 }, () => createRolloutGroup(concurrentHandle(t), GROUP, options())))
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1)
    for (const r of results.filter((x): x is PromiseRejectedResult => x.status === 'rejected')) {
      expect(r.reason).toBeInstanceOf(ConflictError)
      expect((r.reason as ConflictError).message).toMatch(/^chain devnet already has an active rollout group \([0-9a-f-]{36}, pending\)$/)
    }
    expect(await count(t.db, 'rollout_groups')).toBe(1)
  })
})
