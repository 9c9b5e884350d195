/**
 * Bringing the key hierarchy up: `nodeplane secrets init` (explicit, refuses to overwrite),
 * `ensureSecrets` (for `nodeplane up`: whatever is missing is created) and the status report.
 */
import { z } from 'zod'
import { secretsEnv, sharedEnv, type ResolvedPaths } from '../config/env.js'
import type { Queryable } from '../db/knex.js'
import { ConfigError } from '../errors.js'
import type { Logger } from '../log.js'
import { checkMasterKeyFile, createLocalMasterKey, ensureLocalMasterKey, masterKeyFile, type MasterKey, type MasterKeyFileCheck, type SecretsSettings } from './master-key.js'
import { ensureServerKeyPair, listServerKeys, rotateServerKeyPair, type ServerPublicKey } from './server-key.js'

/** The environment of the `secrets` commands. */
export const secretsCommandEnv = z.object({ ...sharedEnv, ...secretsEnv })
export type SecretsCommandConfig = ResolvedPaths<z.infer<typeof secretsCommandEnv>>

export interface SecretsInitResult {
  master_key_file: string
  master_key_id: string
  server_key: ServerPublicKey
}

/**
 * Creates the master key file (ConflictError when it exists: it is never replaced) and the first
 * server key pair. An active pair left from a previous master key (a lost key file) cannot be
 * unwrapped by the new one, so a new pair replaces it.
 */
export async function initSecrets(db: Queryable, settings: SecretsSettings, now: Date = new Date()): Promise<SecretsInitResult> {
  if (settings.SECRETS_PROVIDER !== 'local') {
    throw new ConfigError(['SECRETS_PROVIDER=vault: the master key is the Vault transit key, there is no key file to create; the orchestrator creates the server key pair when it starts'])
  }
  const file = masterKeyFile(settings)
  const masterKey = await createLocalMasterKey(file)
  const active = (await listServerKeys(db)).find((k) => k.retired_at === null)
  const publicKey =
    active && active.master_key_id !== masterKey.id
      ? (await rotateServerKeyPair(db, masterKey, now)).publicKey
      : (await ensureServerKeyPair(db, masterKey, now)).publicKey
  return { master_key_file: file, master_key_id: masterKey.id, server_key: publicKey }
}

export interface EnsuredSecrets {
  masterKey: MasterKey
  masterKeyCreated: boolean
  serverKey: ServerPublicKey
  serverKeyCreated: boolean
}

/** For `nodeplane up`: opens the master key and the active server key pair, creating what is missing. */
export async function ensureSecrets(db: Queryable, settings: SecretsSettings, logger?: Logger, now: Date = new Date()): Promise<EnsuredSecrets> {
  // `up` is the laptop stack: silently making a key file beside a configured Vault would split the keys.
  if (settings.SECRETS_PROVIDER !== 'local') {
    throw new ConfigError(['SECRETS_PROVIDER: `nodeplane up` keeps the master key in the local key file; SECRETS_PROVIDER=vault is for the daemons run on their own (docs/secrets.md)'])
  }
  const file = masterKeyFile(settings)
  const { masterKey, created } = await ensureLocalMasterKey(file)
  if (created) logger?.info({ file, masterKeyId: masterKey.id }, 'created the master key file')
  const server = await ensureServerKeyPair(db, masterKey, now)
  if (server.created) logger?.info({ keyId: server.publicKey.key_id }, 'created the server X25519 key pair')
  return { masterKey, masterKeyCreated: created, serverKey: server.publicKey, serverKeyCreated: server.created }
}

export interface SecretsStatus {
  provider: 'local' | 'vault'
  master_key_file: string
  master_key_file_present: boolean
  /** Present, owner-only, and holding a 32-byte key. */
  master_key_ok: boolean
  master_key_id: string | null
  /** What is wrong with the file, and what to do. */
  problem: string | null
  active_server_key_id: string | null
  server_keys: { total: number; retired: number }
  /** Server keys the current master key cannot unwrap (wrapped by another master key). */
  server_keys_wrapped_by_other_master_keys: number
  /** Secrets are usable: master key ok and an active server key it can unwrap. */
  ready: boolean
}

/** With SECRETS_PROVIDER=vault, `vaultKey` is the opened transit key, or why it could not be opened. */
export async function secretsStatus(db: Queryable, settings: SecretsSettings, vaultKey?: MasterKey | Error): Promise<SecretsStatus> {
  const check: MasterKeyFileCheck =
    settings.SECRETS_PROVIDER === 'local'
      ? checkMasterKeyFile(masterKeyFile(settings))
      : vaultKey && !(vaultKey instanceof Error)
        ? { ok: true, file: vaultKey.id, masterKeyId: vaultKey.id }
        : { ok: false, file: 'vault', present: false, problem: vaultKey?.message ?? 'Vault was not opened' }
  const keys = await listServerKeys(db)
  const active = keys.find((k) => k.retired_at === null)
  const masterKeyId = check.ok ? check.masterKeyId : null
  const foreign = masterKeyId === null ? 0 : keys.filter((k) => k.master_key_id !== masterKeyId).length
  let problem = check.ok ? null : check.problem
  if (check.ok && !active) problem = 'no active server key pair: run `nodeplane secrets rotate-server-key` to create one'
  else if (check.ok && active && active.master_key_id !== masterKeyId) {
    problem = `the active server key was wrapped by master key ${active.master_key_id}, not by ${masterKeyId} in ${check.file}: every server needs the same master key file`
  }
  return {
    provider: settings.SECRETS_PROVIDER,
    master_key_file: check.file,
    master_key_file_present: check.ok || check.present,
    master_key_ok: check.ok,
    master_key_id: masterKeyId,
    problem,
    active_server_key_id: active?.key_id ?? null,
    server_keys: { total: keys.length, retired: keys.filter((k) => k.retired_at !== null).length },
    server_keys_wrapped_by_other_master_keys: foreign,
    ready: problem === null,
  }
}
