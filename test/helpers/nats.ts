/**
 * Starts a real `nats-server` (Debian package) with JetStream in a temp store dir on a free
 * port. `stop()`/`start()` take the same server down and back up on the same port and store,
 * for "NATS is down for a while" tests; `destroy()` stops it for good.
 *
 * `startNats({ secure: true })` runs it the way production does (src/events/nats-security.ts,
 * the configuration `nodeplane certs nats` writes): mutual TLS from a fresh development CA, one
 * nkey user per service with its permissions, JetStream encrypted at rest. `envFor(service)`
 * gives that service's NATS_* settings.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { natsConnectionSettings, type NatsConnectionSettings, type NatsSettings } from '../../src/events/nats-connection.js'
import { ensureNatsSecurityFiles, renderNatsServerConfig, type NatsIdentity, type NatsSecurityFiles } from '../../src/events/nats-security.js'
import { LOCAL_HOSTS } from '../../src/tls/dev-pki.js'
import { freePort, waitFor } from './ports.js'

export type NatsEnv = Required<Pick<NatsSettings, 'NATS_URL'>> & Record<string, string>

export interface NatsServer {
  url: string
  port: number
  /** The certificates, seeds and key of a secure server. */
  security: NatsSecurityFiles | undefined
  /** NATS_URL, and for a secure server the service's TLS and nkey files. */
  envFor(identity: NatsIdentity): NatsEnv
  /** `connectNatsBus`'s (or `connect`'s) connection settings for the identity (TLS, nkey, inbox prefix). */
  connectionFor(identity: NatsIdentity): NatsConnectionSettings
  start(): Promise<void>
  stop(): Promise<void>
  destroy(): Promise<void>
}

export function natsServerBinary(): string {
  const candidates = [process.env.NATS_SERVER_BIN, '/usr/sbin/nats-server', '/usr/bin/nats-server', '/usr/local/bin/nats-server']
  const found = candidates.find((c): c is string => !!c && fs.existsSync(c))
  if (!found) throw new Error('nats-server not found (apt-get install -y nats-server)')
  return found
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => (socket.destroy(), resolve(true)))
    socket.once('error', () => resolve(false))
  })
}

export async function startNats(options: { secure?: boolean } = {}): Promise<NatsServer> {
  const external = process.env.TEST_NATS_URL
  if (external && !options.secure) {
    const envFor = () => ({ NATS_URL: external })
    return { url: external, port: Number(new URL(external).port), security: undefined, envFor, connectionFor: () => ({}), start: async () => {}, stop: async () => {}, destroy: async () => {} }
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-nats-'))
  const port = await freePort()
  const binary = natsServerBinary()
  let child: ChildProcess | undefined
  const url = `nats://127.0.0.1:${port}`
  let args = ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir, '-l', path.join(dir, 'server.log')]
  let security: NatsSecurityFiles | undefined
  if (options.secure) {
    security = ensureNatsSecurityFiles(path.join(dir, 'security'), { hosts: LOCAL_HOSTS })
    const configFile = path.join(security.dir, 'nats-server.conf')
    const users = { 'payment-service': security.services['payment-service'].publicKey, 'control-plane': security.services['control-plane'].publicKey, operator: security.services.operator.publicKey }
    const tls = { certFile: security.serverCertFile, keyFile: security.serverKeyFile, caFile: security.caFile }
    const config = renderNatsServerConfig({ host: '127.0.0.1', port, storeDir: path.join(dir, 'store'), tls, users, encryptionKeyFile: security.encryptionKeyFile, logFile: path.join(dir, 'server.log') })
    fs.writeFileSync(configFile, config)
    args = ['-c', configFile]
  }
  const envFor = (service: NatsIdentity): NatsEnv => {
    if (!security) return { NATS_URL: url }
    const files = security.services[service]
    return { NATS_URL: url, NATS_CA_FILE: security.caFile, NATS_CERT_FILE: files.certFile, NATS_KEY_FILE: files.keyFile, NATS_NKEY_SEED_FILE: files.seedFile }
  }

  const start = async () => {
    if (child) return
    const proc = spawn(binary, args, { stdio: 'ignore' })
    child = proc
    proc.once('exit', () => {
      if (child === proc) child = undefined
    })
    await waitFor(() => portOpen(port), 'nats-server to listen')
  }
  const stop = async () => {
    const proc = child
    if (!proc) return
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
    proc.kill('SIGTERM')
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000)
    await exited
    clearTimeout(timer)
    child = undefined
  }
  await start()
  return {
    url,
    port,
    security,
    envFor,
    connectionFor: (identity) => natsConnectionSettings(envFor(identity), identity === 'operator' ? undefined : identity),
    start,
    stop,
    async destroy() {
      await stop()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}
