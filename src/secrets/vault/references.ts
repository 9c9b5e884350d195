/**
 * `vault:<mount>/<path>#<field>` in a secret setting (docs/secrets.md, "Vault references"):
 * the field of a KV version 2 secret, read once at start. The mount is the first path segment
 * (`vault:secret/nodeplane/payments#card_secret_key` reads `GET /v1/secret/data/nodeplane/payments`).
 */
import type { Env } from '../../config/env.js'
import type { VaultClient } from './client.js'

export interface VaultReference {
  mount: string
  path: string
  field: string
}

const REFERENCE = /^vault:([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.\-/]+)#([A-Za-z0-9_.-]{1,128})$/

export function isVaultReference(value: string | undefined): value is string {
  return value !== undefined && value.startsWith('vault:')
}

export function parseVaultReference(text: string): VaultReference | undefined {
  const match = REFERENCE.exec(text)
  if (!match) return undefined
  const [, mount, secretPath, field] = match as unknown as [string, string, string, string]
  if (secretPath.split('/').some((s) => s === '' || s === '.' || s === '..')) return undefined
  return { mount, path: secretPath, field }
}

export interface ResolvedReferences {
  env: Env
  problems: string[]
  /** variable -> the reference it came from (for messages that must not echo the value). */
  origins: Record<string, string>
}

/** Reads every referenced secret (each KV path once) and puts the fields' values in place. */
export async function resolveVaultReferences(env: Env, names: readonly string[], vault: VaultClient): Promise<ResolvedReferences> {
  const out: Env = { ...env }
  const problems: string[] = []
  const origins: Record<string, string> = {}
  const reads = new Map<string, Promise<Record<string, unknown>>>()
  for (const name of names) {
    const text = env[name]
    if (!isVaultReference(text)) continue
    const reference = parseVaultReference(text)
    if (!reference) {
      problems.push(`${name}=${JSON.stringify(text.slice(0, 200))}: not a Vault reference vault:<mount>/<path>#<field>`)
      continue
    }
    const key = `${reference.mount}/${reference.path}`
    let read = reads.get(key)
    if (!read) {
      read = vault.readKv(reference.mount, reference.path)
      // Awaited below, per variable; one failure must not be an unhandled rejection meanwhile.
      read.catch(() => undefined)
      reads.set(key, read)
    }
    try {
      const value = (await read)[reference.field]
      if (typeof value !== 'string' || value.length === 0) {
        problems.push(`${name}=${JSON.stringify(text)}: the secret ${key} has no field "${reference.field}" holding text`)
        continue
      }
      out[name] = value
      origins[name] = text
    } catch (err) {
      problems.push(`${name}=${JSON.stringify(text)}: ${(err as Error).message}`)
    }
  }
  return { env: out, problems, origins }
}
