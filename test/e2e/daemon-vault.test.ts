/**
 * The real binary with Vault (issue 16), over HTTPS with Vault's CA in VAULT_CACERT: the
 * api-server logs in with AppRole ids from files, takes its DATABASE_URL from KV and its master
 * key from transit, reports Vault in /readyz and revokes its token at SIGTERM; the payment service
 * takes its database URL and card processor keys from KV and charges with them; `secrets rewrap`
 * after a transit rotation. Vault unreachable or untrusted at start and a secret given twice stop
 * a daemon with exit 78 and one line.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { apiServerEnv } from '../../src/config/env.js'
import { createLogger } from '../../src/log.js'
import { PaymentClient } from '../../src/payments/client.js'
import { ensurePaymentDevCertificates } from '../../src/payments/tls.js'
import { createDataKey, loadDataKey } from '../../src/secrets/data-keys.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { openMasterKey } from '../../src/secrets/master-key.js'
import type { RewrapResult } from '../../src/secrets/rewrap.js'
import { createCertificateAuthority } from '../../src/tls/dev-pki.js'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { FakeCardProcessor } from '../helpers/fake-card-processor.js'
import { startFakeVault, type FakeVault } from '../helpers/fake-vault.js'
import { insertTestNode } from '../helpers/fixtures.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { cardPaymentRequest } from '../helpers/payment-requests.js'
import { freePort, waitFor } from '../helpers/ports.js'

describe('nodeplane daemons and secrets commands with Vault over HTTPS', () => {
  let nats: NatsServer
  let database: TestDatabase
  let vault: FakeVault
  let env: Record<string, string>

  beforeAll(async () => {
    const transitKeys = ['nodeplane-master', ...DIALECTS.map((d) => `rewrap-${d}`)]
    ;[nats, database, vault] = await Promise.all([startNats(), createTestDatabase('postgres'), startFakeVault({ tokenTtlSeconds: 2, tls: true, transitKeys })])
    const dir = tempDir('nodeplane-vault-e2e-')
    fs.writeFileSync(path.join(dir, 'role-id'), `${vault.roleId}\n`, { mode: 0o600 })
    fs.writeFileSync(path.join(dir, 'secret-id'), `${vault.secretId}\n`, { mode: 0o600 })
    fs.writeFileSync(path.join(dir, 'vault-ca.pem'), vault.caPem as string)
    vault.setSecret('secret/nodeplane/db', { url: database.url })
    env = {
      NODEPLANE_DATA_DIR: dir,
      NATS_URL: nats.url,
      SECRETS_PROVIDER: 'vault',
      VAULT_ADDR: vault.url,
      VAULT_CACERT: path.join(dir, 'vault-ca.pem'),
      VAULT_ROLE_ID_FILE: path.join(dir, 'role-id'),
      VAULT_SECRET_ID_FILE: path.join(dir, 'secret-id'),
      VAULT_RETRY_MIN: '50ms',
      VAULT_RETRY_MAX: '200ms',
      DATABASE_URL: 'vault:secret/nodeplane/db#url',
    }
  })
  afterAll(async () => {
    await vault?.close()
    await database?.destroy()
    await nats?.destroy()
  })

  it('serves with the master key in Vault (HTTPS, VAULT_CACERT), /readyz 503 naming Vault when the role is revoked, ready again when restored; SIGTERM revokes its token and exits 143', async () => {
    const port = await freePort()
    const child = spawnNodeplane(['daemon', 'api-server'], { env: { ...env, API_SERVER_PORT: String(port) } })
    const url = `http://127.0.0.1:${port}`
    try {
      await waitFor(async () => (await fetch(`${url}/health`).catch(() => undefined))?.ok, 'api-server to listen')
      const ready = await fetch(`${url}/readyz`)
      expect(ready.status).toBe(200)
      expect(await ready.json()).toMatchObject({ components: { database: { status: 'up' }, secrets: { status: 'up' } } })
      // At start the daemon wrapped and unwrapped a probe: the transit key is there and the policy grants it.
      expect(vault.stats.transit).toBeGreaterThanOrEqual(2)

      vault.revokeRole()
      const down = await waitFor(async () => {
        const res = await fetch(`${url}/readyz`)
        return res.status === 503 ? ((await res.json()) as { components: Record<string, { status: string; error?: string }> }) : undefined
      }, '/readyz 503 once the renewal finds the role revoked')
      expect(down.components.secrets?.error).toContain('refused the AppRole login')
      expect((await fetch(`${url}/health`)).status).toBe(200)
      vault.restoreRole()
      await waitFor(async () => (await fetch(`${url}/readyz`)).status === 200, '/readyz to recover')
    } finally {
      child.kill('SIGTERM')
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    const lines = jsonLogLines(result.all)
    expect(lines.some((l) => l.msg === 'logged in to Vault')).toBe(true)
    // The token it held at the end was revoked by the shutdown, not left valid for its lease.
    expect(lines.some((l) => l.msg === 'revoked the Vault token')).toBe(true)
    expect(vault.revokedTokens).toHaveLength(1)
    expect(vault.issuedTokens()).not.toContain(vault.revokedTokens[0])
    for (const secret of [vault.roleId, vault.secretId, database.url, ...vault.issuedTokens(), ...vault.revokedTokens]) expect(String(result.all)).not.toContain(secret)
  })

  it('secrets rotate-server-key wraps the new pair with transit, and secrets status --check finds it ready', async () => {
    const rotated = await nodeplane(['secrets', 'rotate-server-key', '--yes', '--json'], { env })
    expect(rotated.exitCode, rotated.stderr).toBe(0)
    const keyId = (JSON.parse(rotated.stdout) as { key_id: string }).key_id
    const row = (await database.db('server_key_pairs').where({ id: keyId }).first()) as { master_key_id: string; wrapped_secret_key: string }
    expect(row.master_key_id).toBe('vault-transit:transit/nodeplane-master')
    expect(row.wrapped_secret_key).toMatch(/^vault:v1:/)
    const status = await nodeplane(['secrets', 'status', '--check', '--json'], { env })
    expect(status.exitCode, status.stderr).toBe(0)
    expect(JSON.parse(status.stdout)).toMatchObject({ provider: 'vault', ready: true, active_server_key_id: keyId })
  })

  it('systemd generate --vault --secret: AppRole ids and the named secrets as credentials; a setting that is no secret is refused', async () => {
    const out = path.join(tempDir('nodeplane-units-'), 'units')
    const generated = await nodeplane(['systemd', 'generate', '--out', out, '--bin', '/opt/nodeplane/bin/run.js', '--vault', '--secret', 'CARD_PROVIDER_SECRET_KEY', '--json'])
    expect(generated.exitCode, generated.stderr).toBe(0)
    const payment = fs.readFileSync(path.join(out, 'nodeplane-payment-service.service'), 'utf8')
    expect(payment).toContain('LoadCredential=vault-secret-id:/etc/nodeplane/secrets/vault-secret-id')
    expect(payment).toContain('Environment=CARD_PROVIDER_SECRET_KEY_FILE=%d/card-provider-secret-key')
    expect(fs.readFileSync(path.join(out, 'nodeplane-api-server.service'), 'utf8')).not.toContain('card-provider-secret-key')
    const refused = await nodeplane(['systemd', 'generate', '--out', `${out}-2`, '--secret', 'HTTP_HOST'])
    expect(refused.exitCode).not.toBe(0)
    expect(refused.stderr.split('\n').filter((l) => l.startsWith('Error:'))).toEqual([expect.stringContaining('--secret HTTP_HOST: not a secret setting')])
    expect(fs.existsSync(`${out}-2`)).toBe(false)
  })

  it('Vault unreachable at start: exit 78 with one line naming Vault; a secret given both ways: exit 78 naming the variables', async () => {
    const closedPort = await freePort()
    const unreachable = await nodeplane(['daemon', 'api-server'], { env: { ...env, VAULT_ADDR: `http://127.0.0.1:${closedPort}` } })
    expect(unreachable.exitCode).toBe(78)
    const reason = unreachable.stderr.split('\n').filter((l) => l.startsWith('Error:'))
    expect(reason).toHaveLength(1)
    expect(reason[0]).toContain(`VAULT_ADDR: Vault at http://127.0.0.1:${closedPort} is unreachable`)

    // Vault's certificate signed by a CA other than the one in VAULT_CACERT.
    const otherCa = path.join(tempDir(), 'other-ca.pem')
    fs.writeFileSync(otherCa, createCertificateAuthority('not-vaults-ca').certPem)
    const untrusted = await nodeplane(['daemon', 'api-server'], { env: { ...env, VAULT_CACERT: otherCa } })
    expect(untrusted.exitCode).toBe(78)
    const untrustedReason = untrusted.stderr.split('\n').filter((l) => l.startsWith('Error:'))
    expect(untrustedReason).toHaveLength(1)
    expect(untrustedReason[0]).toContain(`VAULT_ADDR, VAULT_CACERT: Vault at ${vault.url} is unreachable: its certificate is not trusted`)
    expect(untrustedReason[0]).toContain(`VAULT_CACERT=${otherCa} is not the CA that signed it`)

    const twice = await nodeplane(['daemon', 'payment-service'], { env: { NATS_URL: nats.url, CARD_PROVIDER_SECRET_KEY: 'sk_live_twice', CARD_PROVIDER_SECRET_KEY_FILE: env.VAULT_SECRET_ID_FILE as string } })
    expect(twice.exitCode).toBe(78)
    expect(twice.stderr).toContain('CARD_PROVIDER_SECRET_KEY and CARD_PROVIDER_SECRET_KEY_FILE: set one of them, not both')
    for (const secret of [vault.roleId, vault.secretId, 'sk_live_twice']) expect(unreachable.stderr + untrusted.stderr + twice.stderr).not.toContain(secret)
  })

  for (const dialect of DIALECTS) {
    it(`${dialect}: the payment service takes its database URL and card processor keys from Vault KV, charges a card with that key, revokes its token once started, and logs none of them`, async () => {
      const payments = await createTestDatabase(dialect, { database: 'payments', migrated: true })
      const cardKey = `sk_live_${crypto.randomBytes(12).toString('hex')}`
      const webhookSecret = `whsec_${crypto.randomBytes(12).toString('hex')}`
      const processor = await FakeCardProcessor.start({ secretKey: cardKey })
      const certs = ensurePaymentDevCertificates(tempDir('nodeplane-vault-payment-certs-'))
      const secretPath = `secret/nodeplane/payments-${dialect}`
      vault.setSecret(secretPath, { database_url: payments.url, card_secret_key: cardKey, card_webhook_secret: webhookSecret })
      const ports = { grpc: await freePort(), http: await freePort(), metrics: await freePort() }
      const revokedBefore = vault.revokedTokens.length
      const { SECRETS_PROVIDER: _transitOnly, DATABASE_URL: _controlPlaneOnly, ...vaultAccess } = env
      const child = spawnNodeplane(['daemon', 'payment-service'], {
        env: {
          ...vaultAccess,
          PAYMENTS_DATABASE_URL: `vault:${secretPath}#database_url`,
          CARD_PROVIDER_ENABLED: 'true',
          CARD_PROVIDER_SECRET_KEY: `vault:${secretPath}#card_secret_key`,
          CARD_PROVIDER_WEBHOOK_SECRET: `vault:${secretPath}#card_webhook_secret`,
          CARD_PROVIDER_API_URL: processor.url,
          PAYMENT_TLS_CA_FILE: certs.caFile,
          PAYMENT_TLS_CERT_FILE: certs.serverCertFile,
          PAYMENT_TLS_KEY_FILE: certs.serverKeyFile,
          PAYMENT_GRPC_PORT: String(ports.grpc),
          PAYMENT_HTTP_PORT: String(ports.http),
          PAYMENT_METRICS_PORT: String(ports.metrics),
        },
      })
      const controlPlane = new PaymentClient({
        target: `127.0.0.1:${ports.grpc}`,
        ca: fs.readFileSync(certs.caFile),
        cert: fs.readFileSync(certs.clients[0]?.certFile as string),
        key: fs.readFileSync(certs.clients[0]?.keyFile as string),
        timeoutMs: 10_000,
      })
      try {
        await waitFor(async () => (await fetch(`http://127.0.0.1:${ports.http}/readyz`).catch(() => undefined))?.status === 200, 'payment-service ready')
        // It needs Vault only at start: the token that read the secrets is already revoked.
        expect(vault.revokedTokens.length).toBe(revokedBefore + 1)
        const customerId = crypto.randomUUID()
        const { payment } = await controlPlane.initiatePayment(cardPaymentRequest(customerId))
        expect(payment).toMatchObject({ status: 'pending', method: 'card', provider: 'card' })
        // The processor created the session, and only ever saw the key Vault holds.
        expect([...processor.sessions.values()].some((session) => session.client_reference_id === payment.id)).toBe(true)
        expect(processor.requests.length).toBeGreaterThan(0)
        expect(processor.requests.every((r) => r.authorized)).toBe(true)
        // The payment is in the database whose URL came from Vault.
        expect(await payments.db('payments').where({ id: payment.id }).first('id')).toBeDefined()
      } finally {
        controlPlane.close()
        child.kill('SIGTERM')
      }
      const result = await child
      try {
        expect(result.exitCode).toBe(143)
        for (const secret of [cardKey, webhookSecret, payments.url, vault.roleId, vault.secretId, ...vault.revokedTokens]) expect(String(result.all)).not.toContain(secret)
      } finally {
        await processor.close()
        await payments.destroy()
      }
    })

    it(`${dialect}: secrets rewrap after the transit key is rotated; once min_decryption_version is raised every node's data key still decrypts`, async () => {
      const controlPlane = dialect === 'postgres' ? database : await createTestDatabase(dialect)
      const secretPath = `secret/nodeplane/rewrap-${dialect}`
      vault.setSecret(secretPath, { url: controlPlane.url })
      const transitKey = `rewrap-${dialect}`
      const rewrapEnv = { ...env, DATABASE_URL: `vault:${secretPath}#url`, VAULT_TRANSIT_KEY: transitKey }
      const { config, secrets } = await loadSettingsWithSecrets(apiServerEnv, rewrapEnv, (level) => createLogger({ level: level === 'info' ? 'warn' : level }))
      try {
        const masterKey = await openMasterKey(config, secrets)
        const nodes = await Promise.all([1, 2].map(() => insertTestNode(controlPlane.db)))
        const dataKeys = await Promise.all(nodes.map((node) => createDataKey(controlPlane.db, masterKey, node.id)))
        vault.rotateTransitKey(transitKey)

        const rewrapped = await nodeplane(['secrets', 'rewrap', '--json'], { env: rewrapEnv })
        expect(rewrapped.exitCode, rewrapped.stderr).toBe(0)
        const result = JSON.parse(rewrapped.stdout) as RewrapResult
        expect(result).toMatchObject({ master_key_id: `vault-transit:transit/${transitKey}`, latest_version: 2, failures: [] })
        expect(result.data_keys.rewrapped).toBe(2)

        vault.setMinDecryptionVersion(2, transitKey)
        for (const [i, node] of nodes.entries()) expect((await loadDataKey(controlPlane.db, masterKey, node.id)).bytes.equals(dataKeys[i]?.bytes as Buffer)).toBe(true)
      } finally {
        await secrets.close()
        if (controlPlane !== database) await controlPlane.destroy()
      }
    })
  }

  it('secrets rewrap with the local master key file: exit 78 naming SECRETS_PROVIDER, before touching any database', async () => {
    const local = await nodeplane(['secrets', 'rewrap', '--json'], { env: { ...env, SECRETS_PROVIDER: 'local' } })
    expect(local.exitCode).toBe(78)
    expect(JSON.parse(local.stdout)).toMatchObject({ error: { message: expect.stringContaining('SECRETS_PROVIDER: secrets rewrap is for the Vault transit key') } })
  })
})
