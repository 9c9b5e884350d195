/**
 * The bus as a trust boundary, on a real nats-server configured the way `nodeplane certs nats`
 * configures production (mutual TLS, one nkey user per service with its permissions, JetStream
 * encrypted at rest): who may connect, who may publish on PAYMENTS, and what lands on disk.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connect, nkeyAuthenticator, nkeys, type NatsConnection } from 'nats'
import { ConfigError, UnavailableError } from '../../../src/errors.js'
import type { BusMessage, EventBus } from '../../../src/events/bus.js'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { natsConnectionSettings } from '../../../src/events/nats-connection.js'
import { openEventBus } from '../../../src/events/open-bus.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { waitFor } from '../../helpers/ports.js'
import { silentLogger } from './support.js'

let nats: NatsServer
let paymentBus: EventBus
let controlBus: EventBus
const enc = (s: string) => new TextEncoder().encode(s)

beforeAll(async () => {
  nats = await startNats({ secure: true })
  paymentBus = await openEventBus({ settings: nats.envFor('payment-service'), service: 'payment-service', singleProcess: false, logger: silentLogger, name: 'payment-service' })
  controlBus = await openEventBus({ settings: nats.envFor('control-plane'), service: 'control-plane', singleProcess: false, logger: silentLogger, name: 'orchestrator' })
})

afterAll(async () => {
  await paymentBus?.close()
  await controlBus?.close()
  await nats?.destroy()
})

function files() {
  const security = nats.security
  if (!security) throw new Error('secure server expected')
  return security
}

async function refusedConnection(options: Parameters<typeof connect>[0]): Promise<string> {
  let nc: NatsConnection | undefined
  try {
    nc = await connect({ servers: nats.url, reconnect: false, timeout: 3_000, ...options })
  } catch (err) {
    return err instanceof Error ? err.message : String(err)
  }
  await nc.close()
  throw new Error('connection was accepted')
}

describe('NATS with TLS and per-service credentials', () => {
  it('refuses a client without TLS, one without a client certificate and one whose certificate another CA issued', async () => {
    const security = files()
    const seed = fs.readFileSync(security.services['control-plane'].seedFile, 'utf8').trim()
    const authenticator = nkeyAuthenticator(enc(seed))
    // Without our CA the server is not trusted; with it but no client certificate the server hangs up.
    expect(await refusedConnection({ authenticator })).toMatch(/certificate/i)
    const noClientCert = await refusedConnection({ authenticator, tls: { caFile: security.caFile } })
    expect(noClientCert).toBeTruthy()
    const foreign = await startNats({ secure: true })
    try {
      const other = foreign.security?.services['control-plane']
      expect(await refusedConnection({ authenticator, tls: { caFile: security.caFile, certFile: other?.certFile, keyFile: other?.keyFile } })).toBeTruthy()
    } finally {
      await foreign.destroy()
    }
  })

  it('refuses a valid certificate with an unknown nkey or with no credentials at all', async () => {
    const security = files()
    const cp = security.services['control-plane']
    const tls = { caFile: security.caFile, certFile: cp.certFile, keyFile: cp.keyFile }
    const stranger = nkeys.createUser().getSeed()
    expect(await refusedConnection({ tls, authenticator: nkeyAuthenticator(stranger) })).toMatch(/authorization/i)
    expect(await refusedConnection({ tls })).toMatch(/authorization/i)
    // Through the daemon path: the bus reports NATS unusable, naming the settings to check.
    const dir = fs.mkdtempSync(path.join(path.dirname(security.dir), 'stranger-'))
    const seedFile = path.join(dir, 'stranger.nk')
    fs.writeFileSync(seedFile, new TextDecoder().decode(stranger), { mode: 0o600 })
    const opened = openEventBus({ settings: { ...nats.envFor('control-plane'), NATS_NKEY_SEED_FILE: seedFile }, service: 'control-plane', singleProcess: false, logger: silentLogger, name: 'stranger' })
    await expect(opened).rejects.toThrow(UnavailableError)
    await expect(opened).rejects.toThrow(/Authorization Violation/)
  })

  it('refuses missing, unreadable or malformed credential files at start-up with one reason each', () => {
    const env = nats.envFor('control-plane')
    expect(() => natsConnectionSettings({ ...env, NATS_CA_FILE: '/nonexistent/ca.pem' }, 'control-plane')).toThrow(/NATS_CA_FILE="\/nonexistent\/ca.pem": file not found/)
    expect(() => natsConnectionSettings({ NATS_URL: env.NATS_URL, NATS_CERT_FILE: env.NATS_CERT_FILE }, 'control-plane')).toThrow(/set both/)
    // Not a seed: refused before any connection, and the file's content is never echoed.
    const secret = `SUsecret-${crypto.randomUUID()}`
    const seedFile = path.join(files().dir, 'not-a-seed.nk')
    fs.writeFileSync(seedFile, secret, { mode: 0o600 })
    let error: unknown
    try {
      natsConnectionSettings({ ...env, NATS_NKEY_SEED_FILE: seedFile }, 'control-plane')
    } catch (err) {
      error = err
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect(String((error as Error).message)).toMatch(/not an nkey user seed/)
    expect(`${String(error)} ${JSON.stringify(error)}`).not.toContain(secret)
  })

  it('lets only the payment service publish on PAYMENTS; the control plane consumes it and cannot publish there', async () => {
    const received: BusMessage[] = []
    const durable = `security-${crypto.randomUUID().slice(0, 8)}`
    const sub = await controlBus.subscribe({ durable, subject: 'payment.*' }, async (m) => {
      received.push(m)
      m.ack()
    })
    try {
      const forged = crypto.randomUUID()
      await expect(controlBus.publish({ subject: 'payment.completed', data: enc(JSON.stringify({ forged })), messageId: forged })).rejects.toThrow(/permission|timeout/i)
      const genuine = crypto.randomUUID()
      await paymentBus.publish({ subject: 'payment.completed', data: enc(JSON.stringify({ genuine })), messageId: genuine })
      await waitFor(async () => received.length >= 1, 'the payment event to be consumed')
      // Only the genuine one was stored and delivered.
      expect(received.map((m) => m.messageId)).toEqual([genuine])
      // The payment service may not consume, nor publish the control plane's events.
      await expect(paymentBus.subscribe({ durable: `${durable}-ps`, subject: 'payment.*' }, async () => {})).rejects.toThrow()
      await expect(paymentBus.publish({ subject: 'events.node.x.changed', data: enc('{}'), messageId: crypto.randomUUID() })).rejects.toThrow(UnavailableError)
    } finally {
      await sub.close()
    }
  })

  it('does not let the control plane delete or purge PAYMENTS', async () => {
    const security = files()
    const cp = security.services['control-plane']
    const nc = await connect({
      servers: nats.url,
      reconnect: false,
      tls: { caFile: security.caFile, certFile: cp.certFile, keyFile: cp.keyFile },
      authenticator: nkeyAuthenticator(enc(fs.readFileSync(cp.seedFile, 'utf8').trim())),
      inboxPrefix: '_INBOX_control_plane',
    })
    try {
      const jsm = await nc.jetstreamManager({ timeout: 2_000 })
      await expect(jsm.streams.purge('PAYMENTS')).rejects.toThrow()
      await expect(jsm.streams.delete('PAYMENTS')).rejects.toThrow()
      expect((await jsm.streams.info('PAYMENTS')).config.name).toBe('PAYMENTS')
    } finally {
      await nc.close()
    }
  })

  it('stores the streams encrypted: a payload is not readable on disk', async () => {
    const marker = `plaintext-marker-${crypto.randomUUID()}`
    const id = crypto.randomUUID()
    await paymentBus.publish({ subject: 'payment.failed', data: enc(JSON.stringify({ marker })), messageId: id })
    const storeDir = path.join(path.dirname(files().dir), 'store')
    const found: string[] = []
    const walk = (dir: string) => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const full = path.join(dir, entry.name)
        if (entry.isDirectory()) walk(full)
        else found.push(full)
      }
    }
    walk(storeDir)
    expect(found.some((f) => f.endsWith('.blk'))).toBe(true)
    expect(found.filter((f) => fs.readFileSync(f).includes(marker))).toEqual([])
  })
})

describe('NATS without TLS (a laptop)', () => {
  it('connects with a plain nats:// URL and no credential settings', async () => {
    const plain = await startNats()
    try {
      const bus = await connectNatsBus({ url: plain.url, logger: silentLogger, name: 'plain', connection: natsConnectionSettings({ NATS_URL: plain.url }, 'control-plane') })
      expect(await bus.health()).toEqual({ ok: true })
      await bus.close()
    } finally {
      await plain.destroy()
    }
  })
})
