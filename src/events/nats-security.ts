/**
 * The bus as a trust boundary (payment service spec: the PAYMENTS stream "with mutual TLS and
 * encryption"; docs/events.md, "Security"). Each service connects as its own NATS user (an nkey)
 * over mutual TLS, and the server lets each do only what it needs: the payment service alone
 * publishes on `payment.*`; the control plane publishes `events.>` and may only consume
 * PAYMENTS. JetStream stores both streams encrypted (ChaCha20-Poly1305).
 *
 * `renderNatsServerConfig` is the one source of the server configuration: `nodeplane certs nats`
 * writes it for deploys and the test helper starts nats-server with it, so tests check the
 * permissions that ship.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { nkeys } from 'nats'
import { ValidationError } from '../errors.js'
import { createCertificateAuthority, issueCertificate, writePem, type CertificateAuthority } from '../tls/dev-pki.js'
import { STREAMS } from './bus.js'

/** The NATS identities: one per service, shared by that service's daemons and replicas. */
export const NATS_SERVICES = ['payment-service', 'control-plane'] as const
export type NatsService = (typeof NATS_SERVICES)[number]
/**
 * The services plus `operator`: people and tools (`nats stream edit`, backups) with every
 * permission; its seed belongs on an operator's machine, never on a daemon's.
 */
export const NATS_IDENTITIES = [...NATS_SERVICES, 'operator'] as const
export type NatsIdentity = (typeof NATS_IDENTITIES)[number]

/** Which service publishes on each stream; the other may only read it. */
export const STREAM_PUBLISHER: Readonly<Record<(typeof STREAMS)[number]['name'], NatsService>> = {
  PAYMENTS: 'payment-service',
  EVENTS: 'control-plane',
}

/** The streams a service creates and keeps configured (the ones it publishes on). */
export function ownedStreams(service: NatsService): string[] {
  return STREAMS.filter((s) => STREAM_PUBLISHER[s.name] === service).map((s) => s.name)
}

/** Reply subjects of a service's requests (PubAcks, JetStream API answers, pulled messages). */
export function inboxPrefix(service: NatsService): string {
  return `_INBOX_${service.replace(/-/g, '_')}`
}

export interface NatsPermissions {
  publish: { allow: string[] }
  subscribe: { allow: string[] }
}

/**
 * The least each service needs, from what src/events does: publish its own streams' subjects
 * (PubAcks come back on its inbox), look up streams, create and update the streams it owns,
 * and, for a consumer, create a missing stream it reads (never update or delete it), manage its
 * durable pull consumers, pull and acknowledge.
 */
export function natsPermissions(service: NatsService): NatsPermissions {
  const owned = ownedStreams(service)
  const publishSubjects = STREAMS.filter((s) => owned.includes(s.name)).flatMap((s) => [...s.subjects])
  const publish = [
    ...publishSubjects,
    '$JS.API.INFO',
    '$JS.API.STREAM.INFO.*',
    ...owned.flatMap((name) => [`$JS.API.STREAM.CREATE.${name}`, `$JS.API.STREAM.UPDATE.${name}`]),
  ]
  if (service === 'control-plane') {
    const read = STREAMS.filter((s) => !owned.includes(s.name)).map((s) => s.name)
    publish.push(
      ...read.map((name) => `$JS.API.STREAM.CREATE.${name}`),
      '$JS.API.CONSUMER.INFO.*.*',
      '$JS.API.CONSUMER.CREATE.>',
      '$JS.API.CONSUMER.DURABLE.CREATE.>',
      '$JS.API.CONSUMER.MSG.NEXT.*.*',
      '$JS.ACK.>',
    )
  }
  // Core subscriptions on its own subjects too (the rpc-gateway follows health events that way).
  return { publish: { allow: publish }, subscribe: { allow: [`${inboxPrefix(service)}.>`, ...publishSubjects] } }
}

export interface NatsServerConfigOptions {
  host: string
  port: number
  storeDir: string
  tls: { certFile: string; keyFile: string; caFile: string }
  /** Public nkey (starts with U) of each identity's user. */
  users: Readonly<Record<NatsIdentity, string>>
  /**
   * The file holding `key: "<secret>"`, included into the jetstream block so the key stays out
   * of the main file. nats-server resolves includes against the config's directory: it must sit
   * next to the config file.
   */
  encryptionKeyFile: string
  logFile?: string
}

const quote = (value: string) => JSON.stringify(value)
const list = (values: readonly string[]) => `[${values.map(quote).join(', ')}]`

export function renderNatsServerConfig(options: NatsServerConfigOptions): string {
  const users = NATS_SERVICES.map((service) => {
    const p = natsPermissions(service)
    return [
      `    # ${service}`,
      `    { nkey: ${quote(options.users[service])}, permissions: {`,
      `        publish: { allow: ${list(p.publish.allow)} }`,
      `        subscribe: { allow: ${list(p.subscribe.allow)} }`,
      `    } }`,
    ].join('\n')
  })
  users.push(`    # operator: every permission (tools, not daemons)\n    { nkey: ${quote(options.users.operator)} }`)
  return [
    '# nats-server configuration for nodeplane (written by `nodeplane certs nats`; docs/deploy.md).',
    `host: ${quote(options.host)}`,
    `port: ${options.port}`,
    ...(options.logFile ? [`log_file: ${quote(options.logFile)}`] : []),
    '',
    '# Mutual TLS: every client presents a certificate from this CA.',
    'tls {',
    `  cert_file: ${quote(options.tls.certFile)}`,
    `  key_file: ${quote(options.tls.keyFile)}`,
    `  ca_file: ${quote(options.tls.caFile)}`,
    '  verify: true',
    '  # Seconds for the handshake: generous, a daemon starting on a busy host is slow to answer.',
    '  timeout: 10',
    '}',
    '',
    '# One nkey user per service; anything not allowed is refused.',
    'authorization {',
    '  timeout: 10',
    '  users: [',
    users.join('\n'),
    '  ]',
    '}',
    '',
    '# Streams encrypted at rest; the key lives in its own 0600 file.',
    'jetstream {',
    `  store_dir: ${quote(options.storeDir)}`,
    '  cipher: chachapoly',
    `  include ${quote(path.basename(options.encryptionKeyFile))}`,
    '}',
    '',
  ].join('\n')
}

export interface NatsServiceCredentials {
  service: NatsIdentity
  certFile: string
  keyFile: string
  /** The nkey seed (starts with SU), 0600. */
  seedFile: string
  publicKey: string
}

export interface NatsSecurityFiles {
  dir: string
  caFile: string
  serverCertFile: string
  serverKeyFile: string
  encryptionKeyFile: string
  services: Record<NatsIdentity, NatsServiceCredentials>
}

/**
 * A service's connection settings from a `nodeplane certs nats` directory (its CA, client
 * certificate and nkey seed): how `nodeplane up` with NATS_DIR connects each of its services as
 * its own user.
 */
export function natsSettingsFromDir(url: string, dir: string, service: NatsService): { NATS_URL: string; NATS_CA_FILE: string; NATS_CERT_FILE: string; NATS_KEY_FILE: string; NATS_NKEY_SEED_FILE: string } {
  const files = serviceFiles(dir, service)
  return { NATS_URL: url, NATS_CA_FILE: path.join(dir, 'ca.pem'), NATS_CERT_FILE: files.certFile, NATS_KEY_FILE: files.keyFile, NATS_NKEY_SEED_FILE: files.seedFile }
}

function serviceFiles(dir: string, service: NatsIdentity): Omit<NatsServiceCredentials, 'publicKey'> {
  return {
    service,
    certFile: path.join(dir, `client-${service}.pem`),
    keyFile: path.join(dir, `client-${service}-key.pem`),
    seedFile: path.join(dir, `${service}.nk`),
  }
}

export function publicKeyOfSeed(seedFile: string): string {
  const seed = fs.readFileSync(seedFile, 'utf8').trim()
  try {
    return nkeys.fromSeed(new TextEncoder().encode(seed)).getPublicKey()
  } catch {
    throw new ValidationError(`${seedFile} does not hold an nkey user seed`)
  }
}

/**
 * Makes (or completes) the NATS set in `dir`: a CA, the server certificate for `hosts`, and per
 * identity (the services and `operator`) a client certificate and an nkey seed, plus the JetStream encryption key. Keys and
 * seeds are 0600; existing files are kept (an existing encryption key must be: the stored
 * streams are unreadable without it).
 */
export function ensureNatsSecurityFiles(dir: string, options: { hosts: readonly string[] }): NatsSecurityFiles {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const caFile = path.join(dir, 'ca.pem')
  const caKeyFile = path.join(dir, 'ca-key.pem')
  let ca: CertificateAuthority
  if (fs.existsSync(caFile) && fs.existsSync(caKeyFile)) {
    ca = { certPem: fs.readFileSync(caFile, 'utf8'), keyPem: fs.readFileSync(caKeyFile, 'utf8') }
  } else {
    ca = createCertificateAuthority('nodeplane NATS development CA')
    writePem(caKeyFile, ca.keyPem, 0o600)
    writePem(caFile, ca.certPem, 0o644)
  }
  const serverCertFile = path.join(dir, 'server.pem')
  const serverKeyFile = path.join(dir, 'server-key.pem')
  if (!fs.existsSync(serverCertFile) || !fs.existsSync(serverKeyFile)) {
    const issued = issueCertificate(ca, { commonName: 'nodeplane-nats', usage: 'server', hosts: options.hosts })
    writePem(serverKeyFile, issued.keyPem, 0o600)
    writePem(serverCertFile, issued.certPem, 0o644)
  }
  const encryptionKeyFile = path.join(dir, 'jetstream-key.conf')
  if (!fs.existsSync(encryptionKeyFile)) {
    writePem(encryptionKeyFile, `key: ${quote(crypto.randomBytes(32).toString('hex'))}\n`, 0o600)
  }
  const services = {} as Record<NatsIdentity, NatsServiceCredentials>
  for (const service of NATS_IDENTITIES) {
    const files = serviceFiles(dir, service)
    if (!fs.existsSync(files.certFile) || !fs.existsSync(files.keyFile)) {
      const issued = issueCertificate(ca, { commonName: `nodeplane-${service}`, usage: 'client' })
      writePem(files.keyFile, issued.keyPem, 0o600)
      writePem(files.certFile, issued.certPem, 0o644)
    }
    if (!fs.existsSync(files.seedFile)) {
      const user = nkeys.createUser()
      writePem(files.seedFile, `${new TextDecoder().decode(user.getSeed())}\n`, 0o600)
    }
    services[service] = { ...files, publicKey: publicKeyOfSeed(files.seedFile) }
  }
  return { dir, caFile, serverCertFile, serverKeyFile, encryptionKeyFile, services }
}
