/**
 * The real binary with Vault (issue 16): the api-server logs in with AppRole ids from files,
 * takes its DATABASE_URL from KV and its master key from transit, reports Vault in /readyz; Vault
 * unreachable at start and a secret given twice both stop it with exit 78 and one line.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startFakeVault, type FakeVault } from '../helpers/fake-vault.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'

describe('nodeplane daemon api-server with SECRETS_PROVIDER=vault', () => {
  let nats: NatsServer
  let database: TestDatabase
  let vault: FakeVault
  let env: Record<string, string>

  beforeAll(async () => {
    ;[nats, database, vault] = await Promise.all([startNats(), createTestDatabase('postgres'), startFakeVault({ tokenTtlSeconds: 2 })])
    const dir = tempDir('nodeplane-vault-e2e-')
    fs.writeFileSync(path.join(dir, 'role-id'), `${vault.roleId}\n`, { mode: 0o600 })
    fs.writeFileSync(path.join(dir, 'secret-id'), `${vault.secretId}\n`, { mode: 0o600 })
    vault.setSecret('secret/nodeplane/db', { url: database.url })
    env = {
      NODEPLANE_DATA_DIR: dir,
      NATS_URL: nats.url,
      SECRETS_PROVIDER: 'vault',
      VAULT_ADDR: vault.url,
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

  it('serves with the master key in Vault, /readyz 503 naming Vault when the role is revoked, ready again when restored, exit 143 on SIGTERM', async () => {
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
    for (const secret of [vault.roleId, vault.secretId, database.url, ...vault.issuedTokens()]) expect(String(result.all)).not.toContain(secret)
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

    const twice = await nodeplane(['daemon', 'payment-service'], { env: { NATS_URL: nats.url, CARD_PROVIDER_SECRET_KEY: 'sk_live_twice', CARD_PROVIDER_SECRET_KEY_FILE: env.VAULT_SECRET_ID_FILE as string } })
    expect(twice.exitCode).toBe(78)
    expect(twice.stderr).toContain('CARD_PROVIDER_SECRET_KEY and CARD_PROVIDER_SECRET_KEY_FILE: set one of them, not both')
    for (const secret of [vault.roleId, vault.secretId, 'sk_live_twice']) expect(unreachable.stderr + twice.stderr).not.toContain(secret)
  })
})
