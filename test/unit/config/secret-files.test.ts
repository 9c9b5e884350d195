/** `<NAME>_FILE` for every secret setting (docs/configuration.md, "Secrets"). */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadConfig, paymentServiceEnv, apiServerEnv } from '../../../src/config/env.js'
import { SECRET_SETTINGS } from '../../../src/config/secret-settings.js'
import { ConfigError } from '../../../src/errors.js'
import { tempDir } from '../../helpers/temp-dirs.js'

function secretFile(content: string, mode = 0o600): string {
  const file = path.join(tempDir('nodeplane-secret-'), 'secret')
  fs.writeFileSync(file, content, { mode })
  return file
}

function problemsOf(run: () => unknown): string {
  try {
    run()
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return (err as ConfigError).message
  }
  throw new Error('expected a ConfigError')
}

describe('secret settings given as <NAME>_FILE', () => {
  it('reads each value from its file, one trailing newline trimmed', () => {
    const url = 'postgres://payments:s3cr3t-p4ss@db.internal/payments'
    const config = loadConfig(paymentServiceEnv, {
      PAYMENTS_DATABASE_URL_FILE: secretFile(`${url}\n`),
      CARD_PROVIDER_SECRET_KEY_FILE: secretFile('sk_live_abc123\r\n'),
      CARD_PROVIDER_WEBHOOK_SECRET_FILE: secretFile('whsec_no_newline'),
    })
    expect(config.PAYMENTS_DATABASE_URL).toBe(url)
    expect(config.CARD_PROVIDER_SECRET_KEY).toBe('sk_live_abc123')
    expect(config.CARD_PROVIDER_WEBHOOK_SECRET).toBe('whsec_no_newline')
  })

  it('every secret value setting has the form (the list the docs and systemd units use)', () => {
    expect(SECRET_SETTINGS).toEqual(expect.arrayContaining(['DATABASE_URL', 'PAYMENTS_DATABASE_URL', 'CARD_PROVIDER_SECRET_KEY', 'CARD_PROVIDER_WEBHOOK_SECRET', 'AUTH_IDP_WEBHOOK_SIGNING_SECRET', 'AUTH_IDP_SECRET_KEY', 'VAULT_ROLE_ID', 'VAULT_SECRET_ID', 'NATS_NKEY_SEED']))
    const config = loadConfig(apiServerEnv, { AUTH_IDP_SECRET_KEY_FILE: secretFile('sk_idp\n'), DATABASE_URL_FILE: secretFile('sqlite:///var/lib/nodeplane/cp.db\n') })
    expect(config.AUTH_IDP_SECRET_KEY).toBe('sk_idp')
    expect(config.DATABASE_URL).toBe('sqlite:///var/lib/nodeplane/cp.db')
  })

  it('refuses both forms at once, an unreadable, empty or oversized file, naming the variable and never the content', () => {
    const secret = 'sk_live_DO_NOT_PRINT'
    const unreadable = secretFile(secret, 0o000)
    const message = problemsOf(() =>
      loadConfig(paymentServiceEnv, {
        CARD_PROVIDER_SECRET_KEY: secret,
        CARD_PROVIDER_SECRET_KEY_FILE: secretFile(secret),
        CARD_PROVIDER_WEBHOOK_SECRET_FILE: '/nonexistent/webhook-secret',
        PAYMENTS_DATABASE_URL_FILE: secretFile('\n'),
        DATABASE_URL_FILE: secretFile('x'.repeat(70 * 1024)),
        CRYPTO_RPC_URL_FILE: path.dirname(unreadable),
      }),
    )
    expect(message).toContain('CARD_PROVIDER_SECRET_KEY and CARD_PROVIDER_SECRET_KEY_FILE: set one of them, not both')
    expect(message).toContain('CARD_PROVIDER_WEBHOOK_SECRET_FILE="/nonexistent/webhook-secret": cannot read the file (no such file)')
    expect(message).toContain('PAYMENTS_DATABASE_URL_FILE=')
    expect(message).toContain('the file is empty')
    expect(message).toContain('DATABASE_URL_FILE=')
    expect(message).toContain('larger than 64 KiB')
    expect(message).toContain('CRYPTO_RPC_URL_FILE=')
    expect(message).toContain('not a regular file')
    expect(message).not.toContain(secret)
    // Root reads a mode-000 file anyway; as another user it is "permission denied".
    if (process.getuid?.() !== 0) expect(problemsOf(() => loadConfig(paymentServiceEnv, { CARD_PROVIDER_SECRET_KEY_FILE: unreadable }))).toContain('permission denied')
  })

  it('a bad value read from a file is reported by its source, never echoed', () => {
    const message = problemsOf(() => loadConfig(apiServerEnv, { DATABASE_URL_FILE: secretFile('mysql://root:hunter2@db/x\n') }))
    expect(message).toMatch(/DATABASE_URL \(from DATABASE_URL_FILE="[^"]+"\): must be sqlite/)
    expect(message).not.toContain('hunter2')
  })

  it('the NATS seed keeps its file setting: NATS_NKEY_SEED_FILE is a path the NATS connection reads; both forms at once are refused', () => {
    const config = loadConfig(apiServerEnv, { NATS_NKEY_SEED_FILE: '/run/credentials/x/nats.nk' })
    expect(config.NATS_NKEY_SEED_FILE).toBe('/run/credentials/x/nats.nk')
    expect(problemsOf(() => loadConfig(apiServerEnv, { NATS_NKEY_SEED_FILE: '/a', NATS_NKEY_SEED: 'SUAAA' }))).toContain('NATS_NKEY_SEED and NATS_NKEY_SEED_FILE: set one of them, not both')
  })
})

describe('NATS_NKEY_SEED (a seed from Vault or another source, instead of NATS_NKEY_SEED_FILE)', () => {
  it('is used as the nkey; a value that is not a user seed is refused without echoing it', async () => {
    const { natsConnectionSettings } = await import('../../../src/events/nats-connection.js')
    const { nkeys } = await import('nats')
    const seed = new TextDecoder().decode(nkeys.createUser().getSeed())
    expect(natsConnectionSettings({ NATS_NKEY_SEED: seed }, 'control-plane').authenticator).toBeTypeOf('function')
    const message = problemsOf(() => natsConnectionSettings({ NATS_NKEY_SEED: 'SXnot-a-seed-secret' }, 'control-plane'))
    expect(message).toContain('NATS_NKEY_SEED: not an nkey user seed')
    expect(message).not.toContain('not-a-seed-secret')
  })
})
