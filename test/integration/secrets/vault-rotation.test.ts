/**
 * Vault's trust and lifecycle edges (issue 16): HTTPS with a private CA trusted through
 * VAULT_CACERT alone, VAULT_SKIP_VERIFY refused, the token revoked when the client closes, and the
 * transit key rotated then every wrapped value rewrapped so min_decryption_version can be raised.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { apiServerEnv, databaseCommandEnv } from '../../../src/config/env.js'
import { ConfigError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { createDataKey, loadDataKey } from '../../../src/secrets/data-keys.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import { loadSettingsWithSecrets } from '../../../src/secrets/load-settings.js'
import { openMasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKey, generateNodeKey } from '../../../src/secrets/node-keys.js'
import { rewrapMasterKeyValues } from '../../../src/secrets/rewrap.js'
import { sealBlob } from '../../../src/secrets/sealed-blob.js'
import { ensureServerKeyPair, openWithServerKey } from '../../../src/secrets/server-key.js'
import { VaultTransitMasterKey } from '../../../src/secrets/vault/transit-master-key.js'
import { createCertificateAuthority } from '../../../src/tls/dev-pki.js'
import { createTestDatabase, DIALECTS, type Dialect } from '../../helpers/db.js'
import { startFakeVault, type FakeVault } from '../../helpers/fake-vault.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { tempDir } from '../../helpers/temp-dirs.js'
import { LogCapture } from '../http/harness.js'

const cleanups: Array<() => Promise<unknown> | unknown> = []
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.()
})

async function vault(options: { tls?: boolean } = {}): Promise<FakeVault> {
  const v = await startFakeVault(options)
  cleanups.push(() => v.close())
  return v
}

/** A production unit's environment: ids as files, the database URL in KV, the CA as a file when Vault speaks HTTPS. */
function vaultEnv(v: FakeVault, databaseUrl: string): Record<string, string> {
  const dir = tempDir('nodeplane-vault-rotation-')
  fs.writeFileSync(path.join(dir, 'role-id'), v.roleId, { mode: 0o600 })
  fs.writeFileSync(path.join(dir, 'secret-id'), v.secretId, { mode: 0o600 })
  v.setSecret('secret/nodeplane/control-plane', { database_url: databaseUrl })
  const env: Record<string, string> = {
    NODEPLANE_DATA_DIR: dir,
    SECRETS_PROVIDER: 'vault',
    VAULT_ADDR: v.url,
    VAULT_ROLE_ID_FILE: path.join(dir, 'role-id'),
    VAULT_SECRET_ID_FILE: path.join(dir, 'secret-id'),
    DATABASE_URL: 'vault:secret/nodeplane/control-plane#database_url',
    VAULT_REQUEST_TIMEOUT: '2s',
  }
  if (v.caPem) {
    fs.writeFileSync(path.join(dir, 'vault-ca.pem'), v.caPem)
    env.VAULT_CACERT = path.join(dir, 'vault-ca.pem')
  }
  return env
}

async function load(env: Record<string, string>, logs = new LogCapture()) {
  const loaded = await loadSettingsWithSecrets(apiServerEnv, env, (level) => createLogger({ level, destination: logs }))
  cleanups.push(() => loaded.secrets.close())
  return loaded
}

async function transitKey(env: Record<string, string>): Promise<VaultTransitMasterKey> {
  const { config, secrets } = await load(env)
  const masterKey = await openMasterKey(config, secrets)
  if (!(masterKey instanceof VaultTransitMasterKey)) throw new Error('expected the transit master key')
  return masterKey
}

function refusal(err: unknown): string {
  expect(err).toBeInstanceOf(ConfigError)
  const message = (err as Error).message
  expect(message.split('\n')).toHaveLength(1)
  return message
}

describe('Vault over HTTPS: VAULT_CACERT is the only CA trusted', () => {
  it('a certificate from the CA in VAULT_CACERT is accepted; another CA, the system CAs or VAULT_SKIP_VERIFY are refused at start, naming VAULT_ADDR and VAULT_CACERT and no secret', async () => {
    const v = await vault({ tls: true })
    expect(v.url).toMatch(/^https:\/\/127\.0\.0\.1:/)
    const env = vaultEnv(v, 'sqlite:///tmp/never-used.db')
    const { config } = await load(env)
    expect(config.DATABASE_URL).toBe('sqlite:///tmp/never-used.db')
    expect(v.stats.logins).toBe(1)

    const otherCa = path.join(tempDir(), 'other-ca.pem')
    fs.writeFileSync(otherCa, createCertificateAuthority('some-other-ca').certPem)
    const wrongCa = refusal(await load({ ...env, VAULT_CACERT: otherCa }).catch((e: unknown) => e))
    expect(wrongCa).toContain(`VAULT_ADDR, VAULT_CACERT: Vault at ${v.url}`)
    expect(wrongCa).toContain(`VAULT_CACERT=${otherCa} is not the CA that signed it`)

    const systemCas: Record<string, string> = { ...env }
    delete systemCas.VAULT_CACERT
    expect(refusal(await load(systemCas).catch((e: unknown) => e))).toContain('set VAULT_CACERT to the PEM of the CA that signed it')

    const notPem = path.join(tempDir(), 'not-a-ca.pem')
    fs.writeFileSync(notPem, 'hello')
    expect(refusal(await load({ ...env, VAULT_CACERT: notPem }).catch((e: unknown) => e))).toContain(`VAULT_CACERT="${notPem}": not a PEM certificate`)
    expect(refusal(await load({ ...env, VAULT_SKIP_VERIFY: 'true' }).catch((e: unknown) => e))).toContain('VAULT_SKIP_VERIFY="true": not supported: nodeplane always verifies Vault\'s certificate; put the CA that signed it in VAULT_CACERT')
    expect(refusal(await load({ ...env, VAULT_ADDR: 'http://vault.internal:8200' }).catch((e: unknown) => e))).toContain('VAULT_ADDR="http://vault.internal:8200": must be https:// (plain http:// only to 127.0.0.1, ::1 or localhost)')

    // Only the trusted attempt reached the login: nothing was sent to a server the client did not trust.
    expect(v.stats.logins).toBe(1)
    expect(v.stats.refusedLogins).toBe(0)
  })
})

describe('the Vault token is revoked when the client closes', () => {
  it('a daemon holding the transit key revokes at close; a process that only reads references revokes right after start; a Vault gone at close does not hold it up', async () => {
    const v = await vault()
    const env = vaultEnv(v, 'sqlite:///tmp/never-used.db')
    const logs = new LogCapture()
    const transit = await load(env, logs)
    const daemonToken = v.issuedTokens()[0] as string
    expect(v.revokedTokens).toEqual([])
    await transit.secrets.close()
    expect(v.revokedTokens).toEqual([daemonToken])
    expect(logs.text()).toContain('revoked the Vault token')
    expect(logs.text()).not.toContain(daemonToken)

    // `db migrate` and the other reference-only processes: read, then revoke at once.
    const { config } = await loadSettingsWithSecrets(databaseCommandEnv, env, (level) => createLogger({ level, destination: new LogCapture() }))
    expect(config.DATABASE_URL).toBe('sqlite:///tmp/never-used.db')
    expect(v.revokedTokens).toHaveLength(2)
    expect(v.issuedTokens()).toHaveLength(0)

    const gone = await load(env, logs)
    await v.goUnreachable()
    await gone.secrets.close()
    expect(logs.text()).toContain('could not revoke the Vault token; it lapses with its lease')
  })
})

describe.each(DIALECTS)('rotating the transit key, on %s', (dialect: Dialect) => {
  it('secrets rewrap moves every data key and server key to the latest version in batches; after min_decryption_version is raised everything still decrypts, and a value not rewrapped would not', async () => {
    const t = await createTestDatabase(dialect)
    cleanups.push(() => t.destroy())
    const v = await vault()
    const masterKey = await transitKey(vaultEnv(v, t.url))

    const nodes = await Promise.all([1, 2, 3].map(() => insertTestNode(t.db)))
    const chainKeys = new Map<string, Buffer>()
    for (const node of nodes) {
      await generateNodeKey(t.db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, await createDataKey(t.db, masterKey, node.id))
      chainKeys.set(node.id, await decryptNodeKey(t.db, await loadDataKey(t.db, masterKey, node.id), 'validator'))
    }
    const { publicKey } = await ensureServerKeyPair(t.db, masterKey)
    const oldDataKey = (await t.db('node_data_keys').where({ node_id: nodes[0]?.id }).first('wrapped_key')) as { wrapped_key: string }
    expect(oldDataKey.wrapped_key).toMatch(/^vault:v1:/)
    // A row some other master key wrapped (a local key file) is counted, never sent to Vault.
    const stranger = await insertTestNode(t.db)
    await t.db('node_data_keys').insert({ node_id: stranger.id, master_key_id: 'a1b2c3d4e5f60718', wrapped_key: 'local:v1:a1b2c3d4e5f60718:x:y:z', created_at: new Date() })

    expect(v.rotateTransitKey()).toBe(2)
    const late = await insertTestNode(t.db)
    await createDataKey(t.db, masterKey, late.id) // wrapped with v2 already

    const result = await rewrapMasterKeyValues(t.db, masterKey, 2)
    expect(result).toEqual({
      master_key_id: 'vault-transit:transit/nodeplane-master',
      latest_version: 2,
      data_keys: { rewrapped: 3, already_latest: 1, failed: 0, other_master_key: 1 },
      server_keys: { rewrapped: 1, already_latest: 0, failed: 0, other_master_key: 0 },
      failures: [],
    })
    expect(v.stats.rewrapBatches).toBe(3) // four data keys two at a time, one server key
    const wrapped = (await t.db('node_data_keys').where({ master_key_id: masterKey.id }).pluck('wrapped_key')) as string[]
    expect(wrapped.every((w) => w.startsWith('vault:v2:'))).toBe(true)
    expect(((await t.db('server_key_pairs').first('wrapped_secret_key')) as { wrapped_secret_key: string }).wrapped_secret_key).toMatch(/^vault:v2:/)

    v.setMinDecryptionVersion(2)
    for (const node of nodes) {
      const plaintext = await decryptNodeKey(t.db, await loadDataKey(t.db, masterKey, node.id), 'validator')
      expect(plaintext.equals(chainKeys.get(node.id) as Buffer)).toBe(true)
    }
    const secret = crypto.randomBytes(24)
    const opened = await openWithServerKey(t.db, masterKey, sealBlob(secret, Buffer.from(publicKey.public_key, 'base64')))
    expect(Buffer.from(opened.plaintext).equals(secret)).toBe(true)
    // The same data key as it was stored before the rewrap no longer decrypts.
    await expect(masterKey.unwrap(oldDataKey.wrapped_key)).rejects.toBeInstanceOf(KeyMaterialError)

    // Run again: nothing left to do. A value still at v1 now cannot be rewrapped: listed, never overwritten.
    await t.db('node_data_keys').where({ node_id: nodes[0]?.id }).update({ wrapped_key: oldDataKey.wrapped_key })
    const again = await rewrapMasterKeyValues(t.db, masterKey)
    expect(again.data_keys).toEqual({ rewrapped: 0, already_latest: 3, failed: 1, other_master_key: 1 })
    expect(again.failures).toEqual([{ kind: 'data_key', id: nodes[0]?.id, reason: expect.stringContaining('disallowed by policy') }])
    expect(((await t.db('node_data_keys').where({ node_id: nodes[0]?.id }).first('wrapped_key')) as { wrapped_key: string }).wrapped_key).toBe(oldDataKey.wrapped_key)

    // A policy without rewrap is the operator's to fix (exit 78 from the command), not a retry.
    v.denyPath('/v1/transit/rewrap/nodeplane-master')
    const denied = await rewrapMasterKeyValues(t.db, masterKey).catch((e: unknown) => e)
    expect(refusal(denied)).toContain('the policy must grant "update" on transit/rewrap/nodeplane-master')
  })
})
