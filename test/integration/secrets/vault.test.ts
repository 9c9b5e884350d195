/**
 * The Vault adapter through the product's own code paths (issue 16, "The secrets manager"):
 * settings loaded the way a daemon loads them (AppRole ids from files, the database URL from KV),
 * the master key in transit sealing and opening a node's keys on both databases, a token that
 * expires mid-run, a revoked role and a Vault that goes away and comes back, seen through the
 * api-server's /readyz and key export. Every log line is captured and searched for secrets.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { startApiServer } from '../../../daemons/api-server.js'
import { apiServerEnv } from '../../../src/config/env.js'
import { ConfigError } from '../../../src/errors.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { createLogger } from '../../../src/log.js'
import { createDataKey, loadDataKey } from '../../../src/secrets/data-keys.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import { loadSettingsWithSecrets, type SecretsRuntime } from '../../../src/secrets/load-settings.js'
import { LocalFileMasterKey, openMasterKey, type MasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKey, generateNodeKey } from '../../../src/secrets/node-keys.js'
import { ensureServerKeyPair } from '../../../src/secrets/server-key.js'
import { ensureSecrets, initSecrets, secretsStatus } from '../../../src/secrets/setup.js'
import { createTestDatabase, DIALECTS, type Dialect } from '../../helpers/db.js'
import { startFakeVault, type FakeVault } from '../../helpers/fake-vault.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { tempDir } from '../../helpers/temp-dirs.js'
import { newKey } from '../auth/api-harness.js'
import { LogCapture } from '../http/harness.js'

const cleanups: Array<() => Promise<unknown> | unknown> = []
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.()
})

const DB_SECRET = 'secret/nodeplane/control-plane'

async function vault(tokenTtlSeconds = 3600): Promise<FakeVault> {
  const v = await startFakeVault({ tokenTtlSeconds })
  cleanups.push(() => v.close())
  return v
}

/** The environment a production unit gives: ids as files (LoadCredential), the database URL in Vault. */
function vaultEnv(v: FakeVault, databaseUrl: string): Record<string, string> {
  const dir = tempDir('nodeplane-vault-')
  fs.writeFileSync(path.join(dir, 'role-id'), `${v.roleId}\n`, { mode: 0o600 })
  fs.writeFileSync(path.join(dir, 'secret-id'), `${v.secretId}\n`, { mode: 0o600 })
  v.setSecret(DB_SECRET, { database_url: databaseUrl })
  return {
    NODEPLANE_DATA_DIR: dir,
    SECRETS_PROVIDER: 'vault',
    VAULT_ADDR: v.url,
    VAULT_ROLE_ID_FILE: path.join(dir, 'role-id'),
    VAULT_SECRET_ID_FILE: path.join(dir, 'secret-id'),
    DATABASE_URL: `vault:${DB_SECRET}#database_url`,
    VAULT_RETRY_MIN: '20ms',
    VAULT_RETRY_MAX: '100ms',
    VAULT_REQUEST_TIMEOUT: '2s',
  }
}

interface Loaded {
  databaseUrl: string
  masterKey: MasterKey
  secrets: SecretsRuntime
  logs: LogCapture
}

/** What `nodeplane daemon api-server` does before it serves: settings, then the master key. */
async function loadLikeTheApiServer(env: Record<string, string>): Promise<Loaded> {
  const logs = new LogCapture()
  const { config, secrets } = await loadSettingsWithSecrets(apiServerEnv, env, (level) => createLogger({ level, destination: logs }))
  cleanups.push(() => secrets.close())
  const masterKey = await openMasterKey(config, secrets)
  return { databaseUrl: config.DATABASE_URL, masterKey, secrets, logs }
}

function expectNoSecretIn(text: string, v: FakeVault, ...more: string[]): void {
  for (const secret of [v.roleId, v.secretId, ...v.issuedTokens(), ...more]) expect(text).not.toContain(secret)
}

describe.each(DIALECTS)('Vault as the secrets manager, on %s', (dialect: Dialect) => {
  async function database() {
    const t = await createTestDatabase(dialect)
    cleanups.push(() => t.destroy())
    return t
  }

  it('logs in with the AppRole ids from files, reads the database URL from KV and seals a node key with transit: the master key never leaves Vault', async () => {
    const t = await database()
    const v = await vault()
    const first = await loadLikeTheApiServer(vaultEnv(v, t.url))
    expect(first.databaseUrl).toBe(t.url)
    expect(first.masterKey.id).toBe('vault-transit:transit/nodeplane-master')

    const node = await insertTestNode(t.db)
    const dataKey = await createDataKey(t.db, first.masterKey, node.id)
    await generateNodeKey(t.db, { nodeId: node.id, name: 'validator', keyType: 'ed25519' }, dataKey)
    const plaintext = await decryptNodeKey(t.db, dataKey, 'validator')
    const row = (await t.db('node_data_keys').where({ node_id: node.id }).first()) as { wrapped_key: string; master_key_id: string }
    expect(row.master_key_id).toBe('vault-transit:transit/nodeplane-master')
    expect(row.wrapped_key).toMatch(/^vault:v1:/)
    expect(v.stats.transit).toBeGreaterThanOrEqual(3) // the start-up probe's wrap and unwrap, then this data key

    // Another process (its own login) opens it: the key is Vault's, not the first process's.
    const second = await loadLikeTheApiServer(vaultEnv(v, t.url))
    const reopened = await loadDataKey(t.db, second.masterKey, node.id)
    expect((await decryptNodeKey(t.db, reopened, 'validator')).equals(plaintext)).toBe(true)
    expect(v.stats.logins).toBe(2)

    // The local key file adapter cannot open what Vault wrapped, and says why.
    await expect(loadDataKey(t.db, LocalFileMasterKey.fromBytes(crypto.randomBytes(32)), node.id)).rejects.toBeInstanceOf(KeyMaterialError)
    // An altered ciphertext is refused, never opened to other bytes.
    await t.db('node_data_keys').where({ node_id: node.id }).update({ wrapped_key: row.wrapped_key.slice(0, -6) + 'AAAAA=' })
    await expect(loadDataKey(t.db, second.masterKey, node.id)).rejects.toBeInstanceOf(KeyMaterialError)

    expectNoSecretIn(first.logs.text() + second.logs.text(), v, t.url, plaintext.toString('hex'), plaintext.toString('base64'))
  })

  it('secrets status reports the transit key and the server key pair it wrapped; secrets init refuses (there is no key file with Vault)', async () => {
    const t = await database()
    const v = await vault()
    const loaded = await loadLikeTheApiServer(vaultEnv(v, t.url))
    const settings = { NODEPLANE_DATA_DIR: tempDir(), SECRETS_PROVIDER: 'vault' as const }
    expect((await secretsStatus(t.db, settings, loaded.masterKey)).problem).toContain('no active server key pair')
    await ensureServerKeyPair(t.db, loaded.masterKey)
    expect(await secretsStatus(t.db, settings, loaded.masterKey)).toMatchObject({ provider: 'vault', master_key_id: 'vault-transit:transit/nodeplane-master', ready: true })
    expect(await secretsStatus(t.db, settings, new Error('VAULT_ADDR: Vault at x is unreachable'))).toMatchObject({ ready: false, problem: 'VAULT_ADDR: Vault at x is unreachable' })
    await expect(initSecrets(t.db, settings)).rejects.toThrow(/no key file to create/)
    await expect(ensureSecrets(t.db, settings)).rejects.toThrow(/`nodeplane up` keeps the master key in the local key file/)
    expect(fs.readdirSync(settings.NODEPLANE_DATA_DIR)).toEqual([])
  })

  it('a token that expires mid-run is replaced transparently: by renewal before expiry, and by a new login when Vault refuses it', async () => {
    const t = await database()
    const v = await vault(1) // one-second leases: renewal after ~0.67 s
    const loaded = await loadLikeTheApiServer(vaultEnv(v, t.url))
    const node = await insertTestNode(t.db)
    const created = await createDataKey(t.db, loaded.masterKey, node.id)

    await waitFor(async () => v.stats.renewals >= 2, 'two renewals of the token')
    expect(v.stats.logins).toBe(1)
    expect((await loadDataKey(t.db, loaded.masterKey, node.id)).bytes.equals(created.bytes)).toBe(true)

    // Vault drops every token (an operator revoked them, or the max TTL passed between renewals).
    v.expireTokens()
    expect((await loadDataKey(t.db, loaded.masterKey, node.id)).bytes.equals(created.bytes)).toBe(true)
    expect(v.stats.logins).toBe(2)
    expect(loaded.secrets.readiness().secrets).toBeDefined()
    expect(await loaded.secrets.readiness().secrets?.()).toEqual({ status: 'up' })
    expectNoSecretIn(loaded.logs.text(), v)
  })

  it('a revoked role and an unreachable Vault: key export answers 503, /readyz 503 naming Vault, the rest of the API serves; both recover on their own', async () => {
    const t = await database()
    const v = await vault()
    const loaded = await loadLikeTheApiServer(vaultEnv(v, t.url))
    const logs = new LogCapture()
    const bus = createLocalBus()
    cleanups.push(() => bus.close())
    const server = await startApiServer(
      { API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1', HTTP_BODY_LIMIT_BYTES: 1024 * 1024 },
      { db: t.db, bus, logger: createLogger({ destination: logs, level: 'debug' }), masterKey: loaded.masterKey, readinessComponents: loaded.secrets.readiness() },
    )
    cleanups.push(() => server.stop())

    const owner = await insertTestNode(t.db)
    const ownerId = ((await t.db('subscriptions').where({ id: owner.subscription_id }).first('user_id')) as { user_id: string }).user_id
    const bearer = (await newKey(t.db, ownerId, { scopes: ['keys:export', 'nodes:read'] })).key
    await generateNodeKey(t.db, { nodeId: owner.id, name: 'validator', keyType: 'ed25519', exportable: true }, await createDataKey(t.db, loaded.masterKey, owner.id))
    const recipient = nacl.box.keyPair()
    const exportKeys = async () => {
      const res = await fetch(`${server.url}/api/v1/nodes/${owner.id}/keys/export`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
        body: JSON.stringify({ recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') }),
      })
      return { status: res.status, body: (await res.json()) as { error?: string; details?: string; keys?: unknown[] } }
    }
    const readyz = async () => {
      const res = await fetch(`${server.url}/readyz`)
      return { status: res.status, text: await res.text() }
    }
    const nodeRead = async () => (await fetch(`${server.url}/api/v1/nodes/${owner.id}`, { headers: { authorization: `Bearer ${bearer}` } })).status

    expect((await exportKeys()).status).toBe(200)
    expect((await readyz()).status).toBe(200)

    // The role is revoked and the token with it.
    v.revokeRole()
    const refused = await exportKeys()
    expect(refused.status).toBe(503)
    expect(refused.body.error).toBeTruthy()
    // The client learns it may retry; where Vault is and why it refused is for the operator's logs.
    expect(refused.body.details).toContain('retry')
    expect(JSON.stringify(refused.body)).not.toContain(v.url)
    const notReady = await readyz()
    expect(notReady.status).toBe(503)
    expect(notReady.text).toContain('refused the AppRole login')
    expect(await nodeRead()).toBe(200)
    expect(logs.text() + loaded.logs.text()).toContain('Vault is unavailable')
    v.restoreRole()
    await waitFor(async () => (await readyz()).status === 200, '/readyz back to 200 after the role is restored')
    expect((await exportKeys()).status).toBe(200)

    // Vault goes away: noticed by /readyz (sys/health), retried with backoff, back when Vault is.
    await v.goUnreachable()
    const gone = await readyz()
    expect(gone.status).toBe(503)
    expect(gone.text).toContain('unreachable')
    expect((await exportKeys()).status).toBe(503)
    expect(await nodeRead()).toBe(200)
    const refusedLoginsBefore = v.stats.logins
    await v.comeBack()
    await waitFor(async () => (await readyz()).status === 200, '/readyz back to 200 once Vault is reachable')
    expect(v.stats.logins).toBeGreaterThan(refusedLoginsBefore)
    expect((await exportKeys()).status).toBe(200)

    expectNoSecretIn(logs.text() + loaded.logs.text(), v, t.url)
  })
})

describe('Vault settings at start', () => {
  it('refuses, naming the variable and never the value: a missing field, a missing secret, a malformed reference, missing ids', async () => {
    const v = await vault()
    const base = vaultEnv(v, 'sqlite:///tmp/never-used.db')
    const load = (env: Record<string, string>) => loadSettingsWithSecrets(apiServerEnv, env, (level) => createLogger({ level, destination: new LogCapture() }))
    const messages: string[] = []
    const cases: Array<Record<string, string>> = [
      { ...base, DATABASE_URL: `vault:${DB_SECRET}#no_such_field` },
      { ...base, DATABASE_URL: 'vault:secret/nodeplane/nothing-here#database_url' },
      { ...base, DATABASE_URL: 'vault:not a reference' },
      { ...base, VAULT_ROLE_ID_FILE: '/nonexistent/role-id' },
      { NODEPLANE_DATA_DIR: base.NODEPLANE_DATA_DIR as string, SECRETS_PROVIDER: 'vault' },
    ]
    for (const env of cases) {
      const err = await load(env).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(ConfigError)
      messages.push((err as ConfigError).message)
    }
    expect(messages[0]).toContain('no field "no_such_field"')
    expect(messages[1]).toContain('no such secret')
    expect(messages[2]).toContain('DATABASE_URL')
    expect(messages[3]).toContain('VAULT_ROLE_ID_FILE="/nonexistent/role-id": cannot read the file (no such file)')
    expect(messages[4]).toMatch(/VAULT_ADDR: required with SECRETS_PROVIDER=vault; VAULT_ROLE_ID \(or VAULT_ROLE_ID_FILE\)/)
    expectNoSecretIn(messages.join('\n'), v)
  })

  it('Vault unreachable or the login refused at start: a ConfigError naming Vault (the daemon exits 78)', async () => {
    const v = await vault()
    const env = vaultEnv(v, 'sqlite:///tmp/never-used.db')
    v.revokeRole()
    const refused = await loadLikeTheApiServer(env).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(ConfigError)
    expect((refused as Error).message).toContain(`VAULT_ADDR: Vault at ${v.url} refused the AppRole login`)
    await v.goUnreachable()
    const unreachable = await loadLikeTheApiServer(env).catch((e: unknown) => e)
    expect((unreachable as Error).message).toContain(`VAULT_ADDR: Vault at ${v.url} is unreachable`)
    expectNoSecretIn(`${String(refused)}${String(unreachable)}`, v)
  })

  it('a transit key Vault does not have stops the start (ConfigError naming VAULT_TRANSIT_KEY)', async () => {
    const v = await vault()
    const err = await loadLikeTheApiServer({ ...vaultEnv(v, 'sqlite:///tmp/never-used.db'), VAULT_TRANSIT_KEY: 'missing-key' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(ConfigError)
    expect((err as Error).message).toContain('VAULT_TRANSIT_KEY: transit key transit/missing-key is not usable')
  })
})
