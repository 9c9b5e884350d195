/**
 * A daemon's settings with its secrets in place (docs/secrets.md): `<NAME>_FILE` files are read,
 * and when Vault is configured (SECRETS_PROVIDER=vault for a process holding the master key, or
 * any `vault:` reference in its settings) the process logs in to Vault, reads the referenced
 * secrets and keeps the client for the transit engine. Anything wrong, Vault unreachable or
 * refusing the login included, is a ConfigError: the daemon exits 78 with one line naming it.
 */
import fs from 'node:fs'
import type { z } from 'zod'
import { loadConfig, sharedEnv, vaultSettingsSchema, type Env, type ResolvedPaths, type VaultSettings } from '../config/env.js'
import { applySecretFiles, VAULT_REFERENCE_SETTINGS } from '../config/secret-settings.js'
import { ConfigError } from '../errors.js'
import type { ComponentCheck } from '../http/readiness.js'
import type { Logger } from '../log.js'
import { VaultCertificateError, VaultClient, VaultRefusedError, VaultUnreachableError } from './vault/client.js'
import { isVaultReference, resolveVaultReferences } from './vault/references.js'

/** The Vault a process is logged in to, and the transit key it wraps with. */
export interface VaultAccess {
  client: VaultClient
  transitMount: string
  transitKey: string
}

export interface SecretsRuntime {
  vault?: VaultAccess
  /** /readyz components: `secrets` when the process uses Vault after start (the transit engine). */
  readiness(): Record<string, ComponentCheck>
  /** Revokes the Vault token (best effort); nothing to do without Vault. */
  close(): Promise<void>
}

export interface LoadedSettings<T> {
  config: T
  secrets: SecretsRuntime
  logger: Logger
}

export type LoggerFactory = (level: LogLevel) => Logger
type LogLevel = z.infer<typeof sharedEnv.LOG_LEVEL>

const NO_SECRETS: SecretsRuntime = { readiness: () => ({}), close: async () => undefined }

/** `makeLogger` gets LOG_LEVEL before the rest is parsed: Vault's messages need a logger already. */
export async function loadSettingsWithSecrets<S extends z.AnyZodObject>(schema: S, env: Env, makeLogger: LoggerFactory): Promise<LoadedSettings<ResolvedPaths<z.infer<S>>>> {
  const level = sharedEnv.LOG_LEVEL.safeParse(env.LOG_LEVEL)
  const logger = makeLogger(level.success ? level.data : 'info')
  const files = applySecretFiles(env)
  // The daemon's own schema reports file problems together with everything else.
  if (files.problems.length > 0) return { config: loadConfig(schema, env), secrets: NO_SECRETS, logger }
  const shape = schema.shape as Record<string, unknown>
  const references = VAULT_REFERENCE_SETTINGS.filter((name) => name in shape && isVaultReference(files.env[name]))
  const vaultSettings = loadConfig(vaultSettingsSchema, env)
  const transit = 'SECRETS_PROVIDER' in shape && vaultSettings.SECRETS_PROVIDER === 'vault'
  if (!transit && references.length === 0) return { config: loadConfig(schema, env), secrets: NO_SECRETS, logger }

  const why = transit ? 'SECRETS_PROVIDER=vault' : `${references[0]} is a vault: reference`
  const client = await connectVault(vaultSettings, why, logger)
  try {
    const resolved = await resolveVaultReferences(files.env, references, client)
    if (resolved.problems.length > 0) throw new ConfigError(resolved.problems)
    const config = loadConfig(schema, resolved.env, { ...files.origins, ...resolved.origins })
    if (!transit) {
      // References are read once: nothing uses Vault after start, so the token is revoked now
      // (no renewals, no readiness, no token alive for the rest of the process).
      await client.close()
      return { config, secrets: NO_SECRETS, logger }
    }
    const access: VaultAccess = { client, transitMount: vaultSettings.VAULT_TRANSIT_MOUNT, transitKey: vaultSettings.VAULT_TRANSIT_KEY }
    return {
      config,
      logger,
      secrets: {
        vault: access,
        readiness: () => ({ secrets: vaultReadiness(client) }),
        close: () => client.close(),
      },
    }
  } catch (err) {
    await client.close()
    throw err
  }
}

/** /readyz: down (with Vault's reason) while Vault is unreachable or refuses the login. */
export function vaultReadiness(client: VaultClient): ComponentCheck {
  return async () => {
    const health = await client.check()
    return health.ok ? { status: 'up' } : { status: 'down', error: `Vault: ${health.error}` }
  }
}

async function connectVault(settings: VaultSettings, why: string, logger: Logger): Promise<VaultClient> {
  const missing = (['VAULT_ADDR', 'VAULT_ROLE_ID', 'VAULT_SECRET_ID'] as const).filter((name) => settings[name] === undefined)
  if (missing.length > 0) {
    throw new ConfigError(missing.map((name) => `${name}${name === 'VAULT_ADDR' ? '' : ` (or ${name}_FILE)`}: required with ${why}`))
  }
  let caPem: string | undefined
  if (settings.VAULT_CACERT) {
    try {
      caPem = fs.readFileSync(settings.VAULT_CACERT, 'utf8')
    } catch (err) {
      throw new ConfigError([`VAULT_CACERT=${JSON.stringify(settings.VAULT_CACERT)}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? 'error'})`])
    }
    if (!caPem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError([`VAULT_CACERT=${JSON.stringify(settings.VAULT_CACERT)}: not a PEM certificate`])
  }
  try {
    return await VaultClient.connect({
      address: settings.VAULT_ADDR as string,
      caPem,
      caFile: settings.VAULT_CACERT,
      namespace: settings.VAULT_NAMESPACE,
      timeoutMs: settings.VAULT_REQUEST_TIMEOUT,
      roleId: settings.VAULT_ROLE_ID as string,
      secretId: settings.VAULT_SECRET_ID as string,
      approleMount: settings.VAULT_APPROLE_MOUNT,
      retryMinMs: settings.VAULT_RETRY_MIN,
      retryMaxMs: settings.VAULT_RETRY_MAX,
      logger,
    })
  } catch (err) {
    if (err instanceof VaultCertificateError) throw new ConfigError([`VAULT_ADDR, VAULT_CACERT: ${err.message}`])
    if (err instanceof VaultUnreachableError || err instanceof VaultRefusedError) throw new ConfigError([`VAULT_ADDR: ${err.message}`])
    throw err
  }
}
