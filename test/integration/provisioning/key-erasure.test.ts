/**
 * Issue 15, "Keys must die with the node": a node provisioned with a user-provided secret,
 * migrated once (so a backup exists) and terminated leaves nothing of its keys on disk (hosts,
 * agent state directories, the backup store, the SQLite files) nor in any row of the database.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { requestMigration, requestProvision, requestTermination, type LifecycleDeps } from '../../../src/provisioning/index.js'
import type { LocalInfrastructureProvider } from '../../../src/provisioning/infrastructure/local.js'
import { deriveBackupKey } from '../../../src/secrets/backup-keys.js'
import { loadDataKey } from '../../../src/secrets/data-keys.js'
import type { MasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKeys } from '../../../src/secrets/node-keys.js'
import { sealBlob } from '../../../src/secrets/sealed-blob.js'
import { activeServerPublicKey, openWithServerKey } from '../../../src/secrets/server-key.js'
import { getRun, type WorkflowRun, type WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, type TestDatabase, describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import type { RunningGateway } from '../agent-gateway/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished } from './harness.js'

/** Every regular file under `dir`. */
function filesUnder(dir: string): string[] {
  if (!fs.existsSync(dir)) return []
  const out: string[] = []
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name)
    if (entry.isDirectory()) out.push(...filesUnder(p))
    else if (entry.isFile()) out.push(p)
  }
  return out
}

/** Every value of every row of every table, as bytes (binary columns raw and as base64). */
async function databaseDump(db: Db, dialect: string): Promise<Buffer> {
  const tables =
    dialect === 'sqlite'
      ? ((await db.raw("SELECT name FROM sqlite_master WHERE type = 'table'")) as { name: string }[]).map((r) => r.name)
      : ((await db.raw("SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()")) as { rows: { name: string }[] }).rows.map((r) => r.name)
  expect(tables).toEqual(expect.arrayContaining(['node_keys', 'node_data_keys', 'provisioning_inputs', 'agent_commands', 'workflow_steps']))
  const parts: Buffer[] = []
  for (const table of tables) {
    for (const row of (await db(table).select()) as Record<string, unknown>[]) {
      for (const value of Object.values(row)) {
        if (Buffer.isBuffer(value)) parts.push(value, Buffer.from(value.toString('base64')))
        else if (value !== null && value !== undefined) parts.push(Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)))
      }
    }
  }
  return Buffer.concat(parts)
}

/** The sealed boxes a JSON value carries (`ciphertext` fields), base64. */
function ciphertextsIn(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap(ciphertextsIn)
  if (value && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) => (k === 'ciphertext' && typeof v === 'string' ? [v] : ciphertextsIn(v)))
  }
  return []
}

describeEachDialectConcurrently('a terminated node leaves nothing of its keys, on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateway: RunningGateway
  let provider: LocalInfrastructureProvider
  let deps: LifecycleDeps
  let worker: WorkflowWorker
  let root: string
  let store: string
  let masterKey: MasterKey

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    ;({ gateway, provider, deps, root, store, masterKey } = await lifecycleSetting(db))
    worker = startLifecycleWorker(db, deps)
  })
  afterEach(async () => {
    for (const host of fs.readdirSync(root)) await provider.destroyHost(host)
  })
  afterAll(async () => {
    await worker.stop()
    await gateway.stop()
    await t.destroy()
    fs.rmSync(store, { recursive: true, force: true })
  })

  const finished = (runId: string, timeoutMs?: number): Promise<WorkflowRun> => untilRunFinished(db, runId, timeoutMs)

  it('provisioned with a user secret, migrated (a backup), terminated: no byte of a key, secret or their ciphertexts on disk or in the database', { timeout: 180_000 }, async () => {
    const node = await insertTestNode(db)
    const userKey = crypto.randomBytes(32).toString('hex')
    const server = await activeServerPublicKey(db)
    const sealedInput = Buffer.from(sealBlob(Buffer.from(userKey), Buffer.from(server!.public_key, 'base64')))
    const now = new Date()
    await db('provisioning_inputs').insert({
      id: crypto.randomUUID(), subscription_id: node.subscription_id, name: 'fee_recipient_key', type: 'secret', phase: 'pre_provision', source: 'user_provided',
      key_type: 'secp256k1', value: null, sealed_value: sealedInput, status: 'pending', created_at: now, updated_at: now,
    })
    const provisioned = await finished((await requestProvision(db, node.id)).run.id)
    expect(provisioned.status, provisioned.error ?? '').toBe('completed')
    await waitFor(async () => (await findNode(db, node.id))?.sync_status === 'synced', 'sync_status synced', 30_000, 100)

    await setNodeState(db, node.id, 'down')
    const migrated = await finished((await requestMigration(db, node.id, { reason: 'test', now: new Date() })).run.id)
    expect(migrated.status, migrated.error ?? '').toBe('completed')
    expect(migrated.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: true } })
    const hostId = String((await findNode(db, node.id))?.host_id)

    // What must not survive, in every form it takes: each key's plaintext (raw and hex), the
    // chain's node key file, the data key and its wrapped form, the backup key, the sealed user
    // secret, the chain keys' ciphertexts, and every sealed box a command carried.
    const dataKey = await loadDataKey(db, masterKey, node.id)
    const backupKey = deriveBackupKey(dataKey, node.id)
    const keys = await decryptNodeKeys(db, dataKey)
    expect(keys.map((k) => k.name).sort()).toEqual(['fee_recipient_key', 'nodekey', 'validator_key'])
    const wrapped = (await db('node_data_keys').where({ node_id: node.id }).first('wrapped_key')) as { wrapped_key: string }
    const ciphertexts = ((await db('node_keys').where({ node_id: node.id }).pluck('ciphertext')) as string[])
    const commandBoxes = ((await db('agent_commands').where({ node_id: node.id }).select('payload', 'result')) as { payload: unknown; result: unknown }[]).flatMap((c) => [
      ...ciphertextsIn(fromJson(c.payload)),
      ...ciphertextsIn(c.result === null ? null : fromJson(c.result)),
    ])
    // inject_keys twice (provision, migration), capture_keys, backup, restore.
    expect(commandBoxes.length).toBeGreaterThanOrEqual(5)
    const nodekeyFile = fs.readFileSync(path.join(root, hostId, 'state', 'data', 'nodekey'))
    const needles: { what: string; bytes: Buffer }[] = [
      { what: 'user secret', bytes: Buffer.from(userKey) },
      { what: 'chain node key file', bytes: nodekeyFile },
      { what: 'wrapped data key', bytes: Buffer.from(wrapped.wrapped_key) },
      { what: 'sealed user secret', bytes: sealedInput },
      { what: 'sealed user secret (base64)', bytes: Buffer.from(sealedInput.toString('base64')) },
      ...[dataKey.bytes, backupKey].flatMap((k, i) => [
        { what: `${i === 0 ? 'data' : 'backup'} key`, bytes: Buffer.from(k) },
        { what: `${i === 0 ? 'data' : 'backup'} key (hex)`, bytes: Buffer.from(k.toString('hex')) },
        { what: `${i === 0 ? 'data' : 'backup'} key (base64)`, bytes: Buffer.from(k.toString('base64')) },
      ]),
      ...keys.flatMap((k) => [
        { what: `${k.name} plaintext`, bytes: Buffer.from(k.plaintext) },
        { what: `${k.name} plaintext (hex)`, bytes: Buffer.from(k.plaintext.toString('hex')) },
      ]),
      ...ciphertexts.map((c, i) => ({ what: `node key ciphertext ${i}`, bytes: Buffer.from(c) })),
      ...commandBoxes.map((c, i) => ({ what: `sealed box in a command row ${i}`, bytes: Buffer.from(c) })),
    ]
    // The check itself finds them while the node lives: on its host, in the store, in the database.
    const sqliteFiles = dialect === 'sqlite' ? [`${t.url.replace(/^sqlite:\/\//, '')}`, `${t.url.replace(/^sqlite:\/\//, '')}-wal`] : []
    const disk = (): { file: string; bytes: Buffer }[] =>
      [...filesUnder(root), ...filesUnder(store), ...sqliteFiles.filter((f) => fs.existsSync(f))].map((file) => ({ file, bytes: fs.readFileSync(file) }))
    const found = (haystack: { file: string; bytes: Buffer }[]) => needles.flatMap((n) => haystack.filter((h) => h.bytes.includes(n.bytes)).map((h) => `${n.what} in ${h.file}`))
    expect(found(disk()).some((f) => f.startsWith('chain node key file in ') && f.includes(root))).toBe(true)
    expect(found([{ file: 'database', bytes: await databaseDump(db, dialect) }])).toEqual(expect.arrayContaining(['wrapped data key in database', 'sealed user secret in database']))
    // The snapshot in the store is encrypted: the chain's node key file is not in it even now.
    expect(found(filesUnder(store).map((file) => ({ file, bytes: fs.readFileSync(file) })))).toEqual([])
    expect(fs.existsSync(path.join(store, node.id, 'data', 'nodekey'))).toBe(true)
    dataKey.destroy()

    const terminated = await finished((await requestTermination(db, node.id, 'test')).run.id)
    expect(terminated.status, terminated.error ?? '').toBe('completed')
    expect(terminated.result).toEqual({ node_id: node.id, outcome: 'terminated', skipped_steps: [] })

    expect(fs.readdirSync(root)).toEqual([])
    expect(fs.readdirSync(store)).toEqual([])
    expect(found(disk())).toEqual([])
    expect(found([{ file: 'database', bytes: await databaseDump(db, dialect) }])).toEqual([])
    expect(await db('provisioning_inputs').where({ subscription_id: node.subscription_id, type: 'secret' })).toEqual([])
    // And nothing the server key opens is left of the subscription's inputs.
    for (const row of (await db('provisioning_inputs').whereNotNull('sealed_value').select('sealed_value')) as { sealed_value: Buffer }[]) {
      const opened = await openWithServerKey(db, masterKey, new Uint8Array(row.sealed_value)).catch(() => undefined)
      expect(opened && Buffer.from(opened.plaintext).toString()).not.toBe(userKey)
    }
  })
})
