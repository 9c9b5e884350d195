/**
 * A daemon's NATS connection settings: NATS_URL plus, in production, mutual TLS
 * (NATS_CA_FILE, NATS_CERT_FILE, NATS_KEY_FILE) and the service's nkey seed
 * (NATS_NKEY_SEED_FILE), read once at start-up. Without them a plain `nats://` URL still works
 * for a laptop; the server decides what it demands.
 */
import fs from 'node:fs'
import { nkeyAuthenticator, type ConnectionOptions } from 'nats'
import { ConfigError } from '../errors.js'
import { inboxPrefix, type NatsService } from './nats-security.js'

export interface NatsSettings {
  NATS_URL?: string | undefined
  NATS_CA_FILE?: string | undefined
  NATS_CERT_FILE?: string | undefined
  NATS_KEY_FILE?: string | undefined
  NATS_NKEY_SEED_FILE?: string | undefined
  /** The seed itself, when it comes from Vault (docs/secrets.md); NATS_NKEY_SEED_FILE is its file form. */
  NATS_NKEY_SEED?: string | undefined
}

export type NatsConnectionSettings = Omit<ConnectionOptions, 'servers' | 'name' | 'maxReconnectAttempts'>

function readable(name: string, file: string, problems: string[]): boolean {
  try {
    fs.accessSync(file, fs.constants.R_OK)
    return true
  } catch {
    problems.push(`${name}=${JSON.stringify(file)}: file not found or not readable`)
    return false
  }
}

/**
 * TLS and credentials for `connectNatsBus({ connection })`. A client certificate needs its key
 * (and the reverse); every named file must be readable. The seed is read here, so a later
 * change of the file needs a restart, like a certificate.
 */
export function natsConnectionSettings(settings: NatsSettings, service: NatsService | undefined): NatsConnectionSettings {
  const problems: string[] = []
  const { NATS_CA_FILE: ca, NATS_CERT_FILE: cert, NATS_KEY_FILE: key, NATS_NKEY_SEED_FILE: seedFile } = settings
  if (Boolean(cert) !== Boolean(key)) problems.push('NATS_CERT_FILE and NATS_KEY_FILE: set both (the client certificate and its key) or neither')
  for (const [name, file] of [['NATS_CA_FILE', ca], ['NATS_CERT_FILE', cert], ['NATS_KEY_FILE', key], ['NATS_NKEY_SEED_FILE', seedFile]] as const) {
    if (file) readable(name, file, problems)
  }
  let seed: Uint8Array | undefined
  if (settings.NATS_NKEY_SEED !== undefined) {
    // Never echoed: it is the service's credential.
    if (!/^SU[A-Z2-7]{56}$/.test(settings.NATS_NKEY_SEED.trim())) problems.push('NATS_NKEY_SEED: not an nkey user seed (one line starting with SU)')
    else seed = new TextEncoder().encode(settings.NATS_NKEY_SEED.trim())
  } else if (seedFile && problems.length === 0) {
    const text = fs.readFileSync(seedFile, 'utf8').trim()
    if (!/^SU[A-Z2-7]{56}$/.test(text)) problems.push(`NATS_NKEY_SEED_FILE=${JSON.stringify(seedFile)}: not an nkey user seed (one line starting with SU)`)
    else seed = new TextEncoder().encode(text)
  }
  if (problems.length > 0) throw new ConfigError(problems)
  const options: NatsConnectionSettings = {}
  if (ca || cert) {
    options.tls = { ...(ca ? { caFile: ca } : {}), ...(cert && key ? { certFile: cert, keyFile: key } : {}) }
  }
  if (seed) options.authenticator = nkeyAuthenticator(seed)
  // Replies to this service's requests arrive under its own prefix, the only one its user may read.
  if (service) options.inboxPrefix = inboxPrefix(service)
  return options
}
