import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ConflictError, NotFoundError } from '../../../src/errors.js'
import { BackupDecryptionError, decryptBackupFile, deriveBackupKey, encryptBackupFile } from '../../../src/secrets/backup-keys.js'
import { createDataKey, DataKey, deleteNodeKeys, hasDataKey, loadDataKey } from '../../../src/secrets/data-keys.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { decryptKeyMaterial, decryptNodeKey, decryptNodeKeys, generateNodeKey, listNodeKeys, storeNodeKey } from '../../../src/secrets/node-keys.js'
import { ensureServerKeyPair } from '../../../src/secrets/server-key.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'

const open: TestDatabase[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.destroy()))
})

async function database(dialect: (typeof DIALECTS)[number]): Promise<TestDatabase> {
  const t = await createTestDatabase(dialect)
  open.push(t)
  return t
}

const newMasterKey = () => LocalFileMasterKey.fromBytes(crypto.randomBytes(32))

describe.each(DIALECTS)('key hierarchy on %s', (dialect) => {
  it('creates a data key once: the second call (and a concurrent one) returns the same key, stored only wrapped', async () => {
    const { db } = await database(dialect)
    const mk = newMasterKey()
    const node = await insertTestNode(db)
    const [first, concurrent] = await Promise.all([createDataKey(db, mk, node.id), createDataKey(db, mk, node.id)])
    const again = await createDataKey(db, mk, node.id)
    const loaded = await loadDataKey(db, mk, node.id)
    for (const k of [concurrent, again, loaded]) expect(k.bytes.equals(first.bytes)).toBe(true)
    const rows = await db('node_data_keys').where({ node_id: node.id })
    expect(rows).toHaveLength(1)
    expect(rows[0].master_key_id).toBe(mk.id)
    expect(String(rows[0].wrapped_key)).not.toContain(first.bytes.toString('base64url'))
    expect(String(rows[0].wrapped_key)).not.toContain(first.bytes.toString('hex'))
    // Another node, another key.
    const other = await insertTestNode(db)
    expect((await createDataKey(db, mk, other.id)).bytes.equals(first.bytes)).toBe(false)
  })

  it('cannot unwrap a data key with another master key', async () => {
    const { db } = await database(dialect)
    const node = await insertTestNode(db)
    await createDataKey(db, newMasterKey(), node.id)
    const err = await loadDataKey(db, newMasterKey(), node.id).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(KeyMaterialError)
    expect((err as Error).message).toContain(node.id)
  })

  it('stores ed25519, secp256k1 and opaque keys encrypted, lists metadata only, and decrypts them', async () => {
    const { db } = await database(dialect)
    const mk = newMasterKey()
    const node = await insertTestNode(db)
    const dataKey = await createDataKey(db, mk, node.id)
    const ed = await generateNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, dataKey)
    const eth = await generateNodeKey(db, { nodeId: node.id, name: 'signer', keyType: 'secp256k1', exportable: false }, dataKey)
    const keystore = Buffer.from('{"crypto":{"cipher":"aes-128-ctr"}}')
    const opaque = await storeNodeKey(db, { nodeId: node.id, name: 'keystore.json', keyType: 'opaque', source: 'user_provided', plaintext: keystore, exportable: true }, dataKey)

    expect(ed).toMatchObject({ key_type: 'ed25519', source: 'generated', exportable: true, address: null })
    expect(ed.public_key).toMatch(/^[0-9a-f]{64}$/)
    expect(eth).toMatchObject({ key_type: 'secp256k1', exportable: false })
    expect(eth.address).toMatch(/^0x[0-9a-fA-F]{40}$/)
    expect(opaque).toMatchObject({ key_type: 'opaque', source: 'user_provided', public_key: null })

    const listed = await listNodeKeys(db, node.id)
    expect(listed.map((k) => k.name)).toEqual(['keystore.json', 'signer', 'validator'])
    expect(listed).toEqual([opaque, eth, ed])
    for (const k of listed) expect(Object.keys(k)).not.toContain('ciphertext')

    // A fresh data key object from the database (as another process would) decrypts them.
    const reloaded = await loadDataKey(db, mk, node.id)
    const edPrivate = await decryptNodeKey(db, reloaded, 'validator')
    const { derivePublicKey } = await import('../../../src/secrets/node-keys.js')
    expect(derivePublicKey('ed25519', edPrivate)).toBe(ed.public_key)
    expect(derivePublicKey('secp256k1', await decryptNodeKey(db, reloaded, 'signer'))).toBe(eth.public_key)
    expect((await decryptNodeKey(db, reloaded, 'keystore.json')).equals(keystore)).toBe(true)
    expect((await decryptNodeKeys(db, reloaded, { exportableOnly: true })).map((k) => k.name)).toEqual(['keystore.json', 'validator'])
    await expect(decryptNodeKey(db, reloaded, 'absent')).rejects.toBeInstanceOf(NotFoundError)

    // Nothing stored in the clear.
    const stored = JSON.stringify(await db('node_keys').select('*'))
    expect(stored).not.toContain(edPrivate.toString('hex'))
    expect(stored).not.toContain(edPrivate.toString('base64'))
    expect(stored).not.toContain(keystore.toString())
  })

  it('generates idempotently, and refuses a second key of the same name or a different type', async () => {
    const { db } = await database(dialect)
    const mk = newMasterKey()
    const node = await insertTestNode(db)
    const dataKey = await createDataKey(db, mk, node.id)
    const first = await generateNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, dataKey)
    const material = await decryptNodeKey(db, dataKey, 'validator')
    expect(await generateNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, dataKey)).toEqual(first)
    expect((await decryptNodeKey(db, dataKey, 'validator')).equals(material)).toBe(true)
    await expect(generateNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'secp256k1' }, dataKey)).rejects.toBeInstanceOf(ConflictError)
    await expect(
      storeNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'opaque', source: 'user_provided', plaintext: Buffer.from('x'), exportable: true }, dataKey),
    ).rejects.toBeInstanceOf(ConflictError)
    await expect(
      storeNodeKey(db, { nodeId: node.id, name: 'mismatch', keyType: 'ed25519', source: 'user_provided', plaintext: crypto.randomBytes(32), publicKey: first.public_key, exportable: true }, dataKey),
    ).rejects.toThrow('the public key does not belong to the private key')
  })

  it('binds each ciphertext to its row: copied to another key or another node, it does not decrypt', async () => {
    const { db } = await database(dialect)
    const mk = newMasterKey()
    const a = await insertTestNode(db)
    const b = await insertTestNode(db)
    const keyA = await createDataKey(db, mk, a.id)
    const keyB = await createDataKey(db, mk, b.id)
    await generateNodeKey(db, { nodeId: a.id, name: 'validator', keyType: 'ed25519' }, keyA)
    await generateNodeKey(db, { nodeId: a.id, name: 'operator', keyType: 'ed25519' }, keyA)
    await generateNodeKey(db, { nodeId: b.id, name: 'validator', keyType: 'ed25519' }, keyB)
    const ciphertext = (await db('node_keys').where({ node_id: a.id, name: 'validator' }).first('ciphertext')).ciphertext as string

    await db('node_keys').where({ node_id: a.id, name: 'operator' }).update({ ciphertext })
    await expect(decryptNodeKey(db, keyA, 'operator')).rejects.toBeInstanceOf(KeyMaterialError)

    await db('node_keys').where({ node_id: b.id, name: 'validator' }).update({ ciphertext })
    await expect(decryptNodeKey(db, keyB, 'validator')).rejects.toBeInstanceOf(KeyMaterialError)
    // Even moving the data key along does not help: the node id is bound too.
    const wrappedA = (await db('node_data_keys').where({ node_id: a.id }).first('wrapped_key')).wrapped_key as string
    await db('node_data_keys').where({ node_id: b.id }).update({ wrapped_key: wrappedA })
    await expect(decryptNodeKey(db, await loadDataKey(db, mk, b.id), 'validator')).rejects.toBeInstanceOf(KeyMaterialError)
    // The original row still decrypts.
    expect(await decryptNodeKey(db, keyA, 'validator')).toHaveLength(32)
  })

  it('deleting the keys makes recovery impossible with anything the system holds: the node keys and every backup of the node', async () => {
    const { db } = await database(dialect)
    const masterKeyBytes = crypto.randomBytes(32)
    const mk = LocalFileMasterKey.fromBytes(masterKeyBytes)
    const node = await insertTestNode(db)
    const survivor = await insertTestNode(db)
    await ensureServerKeyPair(db, mk)
    const dataKey = await createDataKey(db, mk, node.id)
    await generateNodeKey(db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, dataKey)
    await generateNodeKey(db, { nodeId: node.id, name: 'signer', keyType: 'secp256k1' }, dataKey)
    const survivorKey = await createDataKey(db, mk, survivor.id)
    await generateNodeKey(db, { nodeId: survivor.id, name: 'validator', keyType: 'ed25519' }, survivorKey)
    // An attacker (or a careless backup) kept the node's ciphertexts aside, and a copy of a
    // migration backup file (encrypted under the backup key the data key derives).
    const keptAside = (await db('node_keys').where({ node_id: node.id }).select('name', 'ciphertext')) as { name: string; ciphertext: string }[]
    expect(keptAside).toHaveLength(2)
    const dir = tempDir('nodeplane-key-store-')
    const chainKey = crypto.randomBytes(64)
    fs.writeFileSync(path.join(dir, 'nodekey'), chainKey)
    const backupKey = deriveBackupKey(dataKey, node.id)
    await encryptBackupFile(backupKey, node.id, 'data/nodekey', path.join(dir, 'nodekey'), path.join(dir, 'nodekey.backup'), 0o600)
    expect(fs.readFileSync(path.join(dir, 'nodekey.backup')).includes(chainKey)).toBe(false)
    // While the data key exists, it opens.
    await decryptBackupFile(backupKey, node.id, 'data/nodekey', path.join(dir, 'nodekey.backup'), path.join(dir, 'restored'), 0o600)
    expect(fs.readFileSync(path.join(dir, 'restored'))).toEqual(chainKey)
    backupKey.fill(0)
    dataKey.destroy()

    expect(await deleteNodeKeys(db, node.id)).toEqual({ keys: 2, dataKeys: 1 })
    expect(await deleteNodeKeys(db, node.id)).toEqual({ keys: 0, dataKeys: 0 })
    expect(await hasDataKey(db, node.id)).toBe(false)
    expect(await listNodeKeys(db, node.id)).toEqual([])
    const gone = await loadDataKey(db, mk, node.id).catch((e: unknown) => e)
    expect(gone).toBeInstanceOf(NotFoundError)
    expect((gone as NotFoundError).details).toContain('cannot be recovered')

    // Every key the system can still produce: each data key left in the database, a new data
    // key for the same node, and the master key itself used directly. None opens them.
    const candidates: DataKey[] = []
    for (const row of (await db('node_data_keys').select('node_id', 'wrapped_key')) as { node_id: string; wrapped_key: string }[]) {
      candidates.push(new DataKey(node.id, await mk.unwrap(row.wrapped_key)))
    }
    candidates.push(new DataKey(node.id, (await createDataKey(db, mk, node.id)).bytes))
    for (const row of (await db('server_key_pairs').select('wrapped_secret_key')) as { wrapped_secret_key: string }[]) {
      candidates.push(new DataKey(node.id, await mk.unwrap(row.wrapped_secret_key)))
    }
    candidates.push(new DataKey(node.id, masterKeyBytes))
    expect(candidates.length).toBe(4)
    for (const { name, ciphertext } of keptAside) {
      for (const candidate of candidates) expect(() => decryptKeyMaterial(candidate, name, ciphertext)).toThrow(KeyMaterialError)
    }
    // Nor does any backup key they derive, nor the candidates used as a backup key directly.
    for (const [i, candidate] of candidates.entries()) {
      for (const [j, key] of [deriveBackupKey(candidate, node.id), candidate.bytes].entries()) {
        await expect(decryptBackupFile(key, node.id, 'data/nodekey', path.join(dir, 'nodekey.backup'), path.join(dir, `try-${i}-${j}`), 0o600)).rejects.toThrow(BackupDecryptionError)
        expect(fs.existsSync(path.join(dir, `try-${i}-${j}`))).toBe(false)
      }
    }
    // The other node's keys are untouched.
    expect(await decryptNodeKey(db, await loadDataKey(db, mk, survivor.id), 'validator')).toHaveLength(32)
  })
})
