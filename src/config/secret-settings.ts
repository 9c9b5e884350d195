/**
 * Settings that hold a secret (docs/configuration.md, "Secrets"). Each may be given as
 * `<NAME>_FILE=/path` instead of its value, so production never needs a secret in the environment
 * (systemd `LoadCredential=` hands the file to the unit). In the settings that `vault:` references
 * may fill (docs/secrets.md), the value can also be `vault:<mount>/<path>#<field>`.
 *
 * Settings that already name a file (SECRETS_MASTER_KEY_FILE, NATS_KEY_FILE, …) are secrets too,
 * listed in SECRET_FILE_SETTINGS for the systemd generator; their files are read by their users.
 */
import fs from 'node:fs'
import type { Env } from './env.js'

/** Secret values: each also accepted as `<NAME>_FILE`. */
export const SECRET_SETTINGS = [
  'DATABASE_URL',
  'PAYMENTS_DATABASE_URL',
  'NATS_URL',
  'NATS_NKEY_SEED',
  'AUTH_IDP_SECRET_KEY',
  'AUTH_IDP_WEBHOOK_SIGNING_SECRET',
  'CARD_PROVIDER_SECRET_KEY',
  'CARD_PROVIDER_WEBHOOK_SECRET',
  'CRYPTO_RPC_URL',
  'VAULT_ROLE_ID',
  'VAULT_SECRET_ID',
] as const
export type SecretSetting = (typeof SECRET_SETTINGS)[number]

/**
 * `NATS_NKEY_SEED_FILE` was a setting of its own before the rule (a path the NATS connection
 * reads); it stays the file form of NATS_NKEY_SEED and is read there, not here.
 */
const FILE_READ_BY_ITS_USER: ReadonlySet<string> = new Set(['NATS_NKEY_SEED'])

/** Settings naming a file that holds a secret (keys, seeds): handed over as files, never as values. */
export const SECRET_FILE_SETTINGS = [
  'SECRETS_MASTER_KEY_FILE',
  'NATS_KEY_FILE',
  'NATS_NKEY_SEED_FILE',
  'AUTH_SIGNING_KEY_FILE',
  'PAYMENT_TLS_KEY_FILE',
  'PAYMENT_CLIENT_KEY_FILE',
  'AGENT_GATEWAY_TLS_KEY_FILE',
] as const

/** Vault may fill these: every secret value except the Vault login itself. */
export const VAULT_REFERENCE_SETTINGS: readonly SecretSetting[] = SECRET_SETTINGS.filter((n) => n !== 'VAULT_ROLE_ID' && n !== 'VAULT_SECRET_ID')

export function isSecretSetting(name: string): boolean {
  return (SECRET_SETTINGS as readonly string[]).includes(name)
}

export interface SecretFilesResult {
  env: Env
  problems: string[]
  /** Where each value read from a file came from, for messages that must not echo it. */
  origins: Record<string, string>
}

const MAX_SECRET_FILE_BYTES = 64 * 1024

/**
 * Replaces every `<NAME>_FILE` of a secret setting by `<NAME>` = the file's content (one trailing
 * newline trimmed, as `echo` and editors leave one). Both forms given, an unreadable, empty or
 * oversized file: a problem naming the variable and the path, never the content.
 */
export function applySecretFiles(env: Env): SecretFilesResult {
  const out: Env = { ...env }
  const problems: string[] = []
  const origins: Record<string, string> = {}
  for (const name of SECRET_SETTINGS) {
    if (FILE_READ_BY_ITS_USER.has(name)) {
      if (env[name] !== undefined && env[`${name}_FILE`] !== undefined) problems.push(`${name} and ${name}_FILE: set one of them, not both`)
      continue
    }
    const fileVariable = `${name}_FILE`
    const file = env[fileVariable]
    if (file === undefined) continue
    delete out[fileVariable]
    if (env[name] !== undefined) {
      problems.push(`${name} and ${fileVariable}: set one of them, not both`)
      continue
    }
    const content = readSecretFile(fileVariable, file, problems)
    if (content !== undefined) {
      out[name] = content
      origins[name] = `${fileVariable}=${JSON.stringify(file)}`
    }
  }
  return { env: out, problems, origins }
}

function readSecretFile(variable: string, file: string, problems: string[]): string | undefined {
  let content: Buffer
  try {
    const stat = fs.statSync(file)
    if (!stat.isFile()) {
      problems.push(`${variable}=${JSON.stringify(file)}: not a regular file`)
      return undefined
    }
    if (stat.size > MAX_SECRET_FILE_BYTES) {
      problems.push(`${variable}=${JSON.stringify(file)}: larger than ${MAX_SECRET_FILE_BYTES / 1024} KiB, not a secret value`)
      return undefined
    }
    content = fs.readFileSync(file)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    const reason = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : (code ?? 'cannot read it')
    problems.push(`${variable}=${JSON.stringify(file)}: cannot read the file (${reason})`)
    return undefined
  }
  const text = content.toString('utf8').replace(/\r?\n$/, '')
  content.fill(0)
  if (text.length === 0) {
    problems.push(`${variable}=${JSON.stringify(file)}: the file is empty`)
    return undefined
  }
  return text
}
