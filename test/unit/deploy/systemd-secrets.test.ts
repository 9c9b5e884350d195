/** `nodeplane systemd generate --secret … --vault`: no secret in the environment (issue 16). */
import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { generateSystemdUnits, parseSecretSettings, type GeneratedFile } from '../../../src/deploy/systemd.js'

const BIN = '/opt/nodeplane/bin/run.js'

function service(files: GeneratedFile[], name: string): Record<string, string[]> {
  const file = files.find((f) => f.name === name)
  expect(file, name).toBeDefined()
  const out: Record<string, string[]> = {}
  let inService = false
  for (const line of file!.content.split('\n')) {
    if (line.startsWith('[')) inService = line === '[Service]'
    if (!inService || line.startsWith('#') || !line.includes('=')) continue
    const eq = line.indexOf('=')
    ;(out[line.slice(0, eq)] ??= []).push(line.slice(eq + 1))
  }
  return out
}

describe('secrets as systemd credentials', () => {
  const secrets = ['DATABASE_URL', 'PAYMENTS_DATABASE_URL', 'CARD_PROVIDER_SECRET_KEY', 'CARD_PROVIDER_WEBHOOK_SECRET', 'AUTH_IDP_WEBHOOK_SIGNING_SECRET', 'SECRETS_MASTER_KEY_FILE']
  const files = generateSystemdUnits({ bin: BIN, secrets, secretsDir: '/etc/nodeplane/secrets' })

  it('each unit gets exactly the secrets its daemon reads, as <NAME>_FILE in its credentials directory', () => {
    const payment = service(files, 'nodeplane-payment-service.service')
    expect(payment.LoadCredential).toEqual(expect.arrayContaining([
      'payments-database-url:/etc/nodeplane/secrets/payments-database-url',
      'card-provider-secret-key:/etc/nodeplane/secrets/card-provider-secret-key',
      'card-provider-webhook-secret:/etc/nodeplane/secrets/card-provider-webhook-secret',
    ]))
    expect(payment.Environment).toEqual(expect.arrayContaining(['PAYMENTS_DATABASE_URL_FILE=%d/payments-database-url', 'CARD_PROVIDER_SECRET_KEY_FILE=%d/card-provider-secret-key']))
    // The payment service has no business with the control plane's database or master key.
    expect(payment.LoadCredential?.join('\n')).not.toMatch(/secrets-master-key|:\/etc\/nodeplane\/secrets\/database-url/)

    const api = service(files, 'nodeplane-api-server.service')
    expect(api.Environment).toEqual(expect.arrayContaining(['DATABASE_URL_FILE=%d/database-url', 'SECRETS_MASTER_KEY_FILE=%d/secrets-master-key']))
    expect(api.LoadCredential?.join('\n')).not.toContain('card-provider')

    const auth = service(files, 'nodeplane-auth-server.service')
    expect(auth.Environment).toEqual(expect.arrayContaining(['AUTH_IDP_WEBHOOK_SIGNING_SECRET_FILE=%d/auth-idp-webhook-signing-secret', 'DATABASE_URL_FILE=%d/database-url']))
    expect(auth.LoadCredential?.join('\n')).not.toContain('secrets-master-key')

    // The rpc-gateway reads the control plane's database and nothing secret besides (no master key, no payment secrets).
    const gateway = service(files, 'nodeplane-rpc-gateway.service')
    expect(gateway.LoadCredential).toContain('database-url:/etc/nodeplane/secrets/database-url')
    expect(gateway.LoadCredential?.join('\n')).not.toMatch(/secrets-master-key|payments-database-url|card-provider|auth-idp/)
    expect(gateway.Environment).toEqual(expect.arrayContaining(['DATABASE_URL_FILE=%d/database-url']))

    const migrate = service(files, 'nodeplane-migrate.service')
    expect(migrate.Environment).toEqual(expect.arrayContaining(['DATABASE_URL_FILE=%d/database-url', 'PAYMENTS_DATABASE_URL_FILE=%d/payments-database-url']))
    expect(migrate.LoadCredential).toHaveLength(2)
    // No secret value anywhere in a unit.
    for (const f of files) expect(f.content).not.toMatch(/postgres:\/\/|sk_live|whsec_/)
  })

  it('--vault: every unit gets SECRETS_PROVIDER=vault and the AppRole ids as credentials, nothing else by default', () => {
    const vaultFiles = generateSystemdUnits({ bin: BIN, vault: true })
    for (const name of ['nodeplane-migrate.service', 'nodeplane-api-server.service', 'nodeplane-payment-service.service', 'nodeplane-auth-server.service', 'nodeplane-rpc-gateway.service']) {
      const s = service(vaultFiles, name)
      expect(s.Environment).toEqual(expect.arrayContaining(['SECRETS_PROVIDER=vault', 'VAULT_ROLE_ID_FILE=%d/vault-role-id', 'VAULT_SECRET_ID_FILE=%d/vault-secret-id']))
      expect(s.LoadCredential).toEqual(expect.arrayContaining(['vault-role-id:/etc/nodeplane/secrets/vault-role-id', 'vault-secret-id:/etc/nodeplane/secrets/vault-secret-id']))
    }
    // Without --vault and --secret, units carry no secret credentials (only NATS's).
    const plain = service(generateSystemdUnits({ bin: BIN }), 'nodeplane-auth-server.service')
    expect(plain.LoadCredential).toBeUndefined()
  })

  it('refuses a setting that is not a secret, the NATS credentials (--nats-dir) and a relative --secrets-dir', () => {
    expect(() => parseSecretSettings(['HTTP_HOST'])).toThrow(/--secret HTTP_HOST: not a secret setting/)
    expect(() => parseSecretSettings(['NATS_KEY_FILE'])).toThrow(/--nats-dir/)
    expect(() => generateSystemdUnits({ bin: BIN, secretsDir: 'secrets' })).toThrow(ValidationError)
    expect(parseSecretSettings(['DATABASE_URL,CARD_PROVIDER_SECRET_KEY', 'DATABASE_URL'])).toEqual(['DATABASE_URL', 'CARD_PROVIDER_SECRET_KEY'])
  })
})
